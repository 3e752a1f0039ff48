"""Paid push: pay a destination that answers ``402 Payment Required`` with an L402 challenge.

The pieces, each usable alone:

* :mod:`~django_outbox.payments.challenge`: read ``WWW-Authenticate``, write
  ``Authorization`` (standard library only).
* :mod:`~django_outbox.payments.invoices`: decode a BOLT11 invoice, check network,
  expiry, price and that the macaroon names it; price an amountless one
  (needs ``django-outbox[payments]``: ``bolt11``).
* :mod:`~django_outbox.payments.clients`: the payment client protocol, with
  :mod:`~.clients.lnd` (LND REST, ``requests``) and :mod:`~.clients.cln`
  (Core Lightning, ``pyln-client``: ``django-outbox[cln]``).
* :mod:`~django_outbox.payments.errors`: what can go wrong, and what the caller does.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_outbox.payments.challenge import (
        L402Challenge,
        L402Credentials,
        authorization,
        parse_authorization,
        parse_challenge,
    )
    from django_outbox.payments.errors import (
        ChallengeRefused,
        InvalidCredentials,
        InvoiceRefused,
        PaymentClientError,
        PaymentError,
        PaymentFailed,
        PaymentPending,
        PaymentRefused,
        PaymentUnauthorized,
        PreimageMismatch,
        Reason,
    )

#: The modules that hold the names of ``__all__``, asked in turn.
_MODULES = ("django_outbox.payments.challenge", "django_outbox.payments.errors")

__all__ = [
    "ChallengeRefused",
    "InvalidCredentials",
    "InvoiceRefused",
    "L402Challenge",
    "L402Credentials",
    "PaymentClientError",
    "PaymentError",
    "PaymentFailed",
    "PaymentPending",
    "PaymentRefused",
    "PaymentUnauthorized",
    "PreimageMismatch",
    "Reason",
    "authorization",
    "parse_authorization",
    "parse_challenge",
]


def __getattr__(name: str) -> Any:
    # Lazy: the app imports payments.models whether or not payments are on, and
    # nothing else of paid push is imported until it is used.
    if name in __all__:
        for path in _MODULES:
            module = import_module(path)
            if hasattr(module, name):
                return getattr(module, name)
    raise AttributeError(name)

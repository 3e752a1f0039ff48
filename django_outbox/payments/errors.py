"""The errors of paid push, in one tree under :class:`~django_outbox.exceptions.OutboxError`.

Three kinds matter to the caller, and they call for different actions:

* :class:`PaymentRefused`: *we* decline to pay (a malformed challenge, an expired or
  overpriced invoice...).  Nothing was paid; :attr:`~PaymentRefused.reason` says why.
* :class:`PaymentFailed`: the node answered and says the payment did not happen and is
  not in flight.  Nothing was paid; a new invoice may be paid.
* :class:`PaymentClientError`: the node could not be asked or its answer cannot be
  trusted (timeout, connection refused, a preimage that does not hash to the payment
  hash).  The payment *may* have happened: keep the attempt pending and never pay
  again until ``lookup`` says it failed.

Messages never contain a preimage or a macaroon.
"""

from __future__ import annotations

from enum import StrEnum

from django_outbox.exceptions import OutboxError


class Reason(StrEnum):
    """Why a challenge or an invoice was refused (stable values, fit for logs and metrics)."""

    MALFORMED = "malformed"
    HEADER_TOO_LARGE = "header_too_large"
    NO_CHALLENGE = "no_challenge"
    MULTIPLE_CHALLENGES = "multiple_challenges"
    MACAROON_TOO_LARGE = "macaroon_too_large"
    MACAROON_NOT_BASE64 = "macaroon_not_base64"
    MACAROON_INVALID = "macaroon_invalid"
    INVOICE_TOO_LARGE = "invoice_too_large"
    INVOICE_UNDECODABLE = "invoice_undecodable"
    INVOICE_EXPIRED = "invoice_expired"
    WRONG_NETWORK = "wrong_network"
    OVER_PRICE = "over_price"
    HASH_MISMATCH = "hash_mismatch"
    INVOICE_FROM_THE_FUTURE = "invoice_from_the_future"
    EXPIRY_TOO_LONG = "expiry_too_long"
    AMOUNT_OUT_OF_RANGE = "amount_out_of_range"
    INVOICE_ALREADY_PAID = "invoice_already_paid"


class PaymentError(OutboxError):
    """Base class of the errors of paid push."""


class PaymentRefused(PaymentError):
    """We decline to pay: :attr:`reason` (a :class:`Reason`) says why, ``detail`` adds facts.

    The message is ``"<reason>: <detail>"``; details never quote secrets.
    """

    def __init__(self, reason: Reason, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)


class ChallengeRefused(PaymentRefused):
    """The ``WWW-Authenticate`` answer holds no single, well-formed L402 challenge."""


class InvoiceRefused(PaymentRefused):
    """The invoice is undecodable, expired, for another network, too dear, not the
    one the macaroon names, holds a value no node would write (a creation time in the
    future, an expiry past any horizon, an amount past every bitcoin), or was paid
    already."""


class InvalidCredentials(PaymentError, ValueError):
    """An L402 credential (macaroon, preimage, ``Authorization`` value) is not well formed."""


class PaymentFailed(PaymentError):
    """The node says the payment failed for sure: nothing is in flight, nothing was paid.

    ``reason`` is the node's own words (e.g. LND's ``payment_error``, a CLN error message).
    """

    def __init__(self, reason: str, *, payment_hash: str = "") -> None:
        self.reason = reason
        self.payment_hash = payment_hash
        where = f" (payment hash {payment_hash[:16]})" if payment_hash else ""
        super().__init__(f"payment failed{where}: {reason}")


class PaymentClientError(PaymentError):
    """The node could not say (timeout, connection, unreadable answer): the payment may
    or may not have happened.  Keep the attempt pending and ask ``lookup`` later."""


class PaymentPending(PaymentClientError):
    """The node says the payment is still in flight."""


class PaymentUnauthorized(PaymentClientError):
    """The node refused our credentials (HTTP 401/403, bad macaroon): a configuration
    problem that retrying will not fix."""


class PreimageMismatch(PaymentClientError):
    """The node claimed success with a preimage that does not hash to the payment hash.

    Such a preimage proves nothing and is never used; whether money left is unknown.
    """

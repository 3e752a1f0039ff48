"""Signals an application connects to, sent by the worker for each attempt and give-up.

Every signal is sent with ``sender=Delivery`` (``endpoint_disabled`` with
``sender=Endpoint``) and these keyword arguments:

``delivery_attempted``
    After every attempt, sent or held.  ``delivery`` (the row, state already
    updated), ``inbox``, ``actor`` (the sender's id), ``status`` (int or
    ``None`` when nothing answered), ``error`` (str, empty on success),
    ``held`` (True when a circuit breaker kept it from being sent),
    ``outcome`` (``"delivered"``, ``"refused"``, ``"retry"``, ``"held"``,
    ``"skipped"`` for an unavailable host, ``"expired"`` past the deadline).

``delivery_settled``
    When a delivery is done with other than by giving up: ``delivery``,
    ``inbox``, ``actor``, ``tag`` (batch tag or ``""``), ``status`` (the
    last answer, or ``None``) and ``outcome``: ``"delivered"``,
    ``"refused"`` (an answer that will not change) or ``"skipped"``.

``delivery_failed``
    When a delivery will not be tried again and was not delivered: given up
    (retries or deadline ran out, or by hand), refused (an answer that will
    not change, which is also ``delivery_settled``), or, for a webhook, skipped
    (its endpoint disabled or its host unavailable; also ``delivery_settled``).
    ``delivery``, ``inbox``, ``actor``, ``status`` (last status or ``None``), ``error``, ``tag`` and
    ``deadline`` (True when the batch's deadline was the reason).  A 410 here
    says the inbox or its server is gone.

``endpoint_disabled``
    When a webhook endpoint is disabled, having failed on
    ``OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS`` distinct days with no success (see
    ``docs/webhooks.md``); sent with ``sender=Endpoint`` once that is committed,
    at most once each time it is disabled.  ``endpoint`` (the URL, as stored),
    ``since`` (when it was disabled), ``failure_days``, and its latest failure:
    ``status`` (``None`` when nothing answered) and ``error``.  Deliveries to it
    are skipped, each with ``delivery_failed``, until ``outbox.enable_endpoint``.

``host_unavailable`` (``sender=Host``)
    When a host is marked unavailable (``OUTBOX_UNAVAILABLE_AFTER_DAYS`` days of its
    own failures, no success between): ``host`` (the host name), ``since`` (when, an
    aware ``datetime``) and ``reason`` (its latest failure, e.g. ``"HTTP 503"`` or
    ``"timeout: ..."``).  Deliveries to it are skipped from then on (see
    ``OUTBOX_SKIP_UNAVAILABLE``): an application may stop counting its followers there,
    as Mastodon does.

``host_available`` (``sender=Host``)
    When an unavailable host is available again: it accepted a delivery, an
    operator reset it, or the application called ``outbox.host_seen(host)``.  ``host``.

``delivery_settled`` also carries ``amount_msat``: what the destination charged for
this delivery, in millisatoshi, when it was delivered with a price paid for it (0
otherwise).  Extensions declare their own signals in their own packages.

Receivers run in the worker's recorder thread through ``send_robust``: one
that raises is logged and does not stop delivery.  The signals of an attempt
are sent before its row is saved, while the delivery is still claimed: a
worker that dies in between leaves the delivery to be sent again and its
signals sent again.  They are therefore at least once, and a receiver must
tolerate running twice for one delivery; the ``delivery`` row passed in
already carries its new state, which the database may not show yet.
``endpoint_disabled`` and the host signals are sent once their
change is committed, at most once each (a host marked by two processes at once may
be announced twice).
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

delivery_attempted = Signal()
delivery_settled = Signal()
delivery_failed = Signal()
endpoint_disabled = Signal()
host_unavailable = Signal()
host_available = Signal()

logger = logging.getLogger("django_outbox.signals")


def __getattr__(name: str) -> Signal:
    # Signals of extensions that were declared here once: still found, with a warning.
    from django_outbox.extensions.registry import moved_signal

    return moved_signal(name)


def send_logged(signal: Signal, sender: type, **kwargs: Any) -> None:
    """Send ``signal`` robustly, logging each receiver that raised."""
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            logger.error("receiver %r of a django_outbox signal raised", receiver, exc_info=result)

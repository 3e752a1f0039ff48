"""Signals an application connects to, sent by the worker for each attempt and give-up.

Every signal is sent with ``sender=Delivery`` and these keyword arguments:

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
    (retries or deadline ran out, or by hand) or refused (an answer that will
    not change, which is also ``delivery_settled``).  ``delivery``, ``inbox``,
    ``actor``, ``status`` (last status or ``None``), ``error``, ``tag`` and
    ``deadline`` (True when the batch's deadline was the reason).  A 410 here
    says the inbox or its server is gone.

Receivers run in the worker's recorder thread through ``send_robust``: one
that raises is logged and does not stop delivery.  The signals of an attempt
are sent before its row is saved, while the delivery is still claimed: a
worker that dies in between leaves the delivery to be sent again and its
signals sent again.  They are therefore at least once, and a receiver must
tolerate running twice for one delivery; the ``delivery`` row passed in
already carries its new state, which the database may not show yet.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

delivery_attempted = Signal()
delivery_settled = Signal()
delivery_failed = Signal()

logger = logging.getLogger("django_outbox.signals")


def send_logged(signal: Signal, sender: type, **kwargs: Any) -> None:
    """Send ``signal`` robustly, logging each receiver that raised."""
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            logger.error("receiver %r of a django_outbox signal raised", receiver, exc_info=result)

"""Signals an application connects to, sent by the worker after the row is saved.

Every signal is sent with ``sender=Delivery`` and these keyword arguments:

``delivery_attempted``
    After every attempt, sent or held.  ``delivery`` (the row, state already
    updated), ``inbox``, ``actor`` (the sender's id), ``status`` (int or
    ``None`` when nothing answered), ``error`` (str, empty on success),
    ``held`` (True when a circuit breaker kept it from being sent),
    ``outcome`` (``"delivered"``, ``"refused"``, ``"retry"``, ``"held"``).

``delivery_settled``
    When a delivery is done with other than by giving up: ``delivery``,
    ``inbox``, ``actor``, ``tag`` (batch tag or ``""``) and ``outcome``:
    ``"delivered"``, ``"refused"`` (an answer that will not change, with
    ``status``) or ``"skipped"``.  Sent at least once: a worker that dies
    after the inbox accepted but before the row was saved sends it again, so
    a receiver must tolerate running twice for one delivery.

``delivery_failed``
    When a delivery will not be tried again and was not delivered: given up
    (retries or deadline ran out, or by hand) or refused (an answer that will
    not change, which is also ``delivery_settled``).  ``delivery``, ``inbox``,
    ``actor``, ``status`` (last status or ``None``), ``error``, ``tag`` and
    ``deadline`` (True when the batch's deadline was the reason).  A 410 here
    says the inbox or its server is gone.

Receivers run in the worker through ``send_robust``: one that raises is
logged and does not stop delivery.
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

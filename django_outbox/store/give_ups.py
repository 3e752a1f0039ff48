"""Giving up on live deliveries, and the durable record of the signal that says so.

A give-up (by hand, at a passed deadline, or by a recovery pass for a delivery
that spent every attempt on lost workers) fails the rows and sets
``failed_signal_pending`` in the same transaction; ``delivery_failed`` is sent
after the commit and the flag cleared (:func:`signals_sent`).  A process that
dies in between leaves the flag set, and a recovery pass sends the signal again
(:func:`pending_signals`): at least once, never lost.  This module writes
``Delivery.state`` only for ``live → failed``; every other change is
:mod:`django_outbox.store.transitions`'.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from django_outbox.models import LIVE_STATES, Delivery, DeliveryState, locked
from django_outbox.store.queries import STEP
from django_outbox.values.safe_text import one_line


def give_up(ids: Iterable[int], reason: str, *, deadline: bool = False) -> list[Delivery]:
    """Fail the live deliveries among ``ids`` now; the rows failed, with their new state."""
    now = timezone.now()
    reason = one_line(reason)
    with transaction.atomic():
        rows = list(
            locked(Delivery.objects.filter(id__in=list(ids), state__in=LIVE_STATES))
            .select_related("message")
            .defer("message__body")
        )
        Delivery.objects.filter(id__in=[row.pk for row in rows], state__in=LIVE_STATES).update(
            state=DeliveryState.FAILED,
            last_error=reason,
            deadline_reached=deadline,
            finished_at=now,
            failed_signal_pending=True,
            claimed_by="",
            lease_until=None,
        )
    for row in rows:
        row.state, row.last_error, row.deadline_reached = DeliveryState.FAILED, reason, deadline
        row.finished_at, row.claimed_by, row.lease_until = now, "", None
        row.failed_signal_pending = True
    return rows


def pending_signals(older_than: float) -> list[Delivery]:
    """Failed deliveries whose ``delivery_failed`` was not known to be sent
    ``older_than`` seconds after the give-up (a step's worth), as signals pass them."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    return list(
        Delivery.objects.filter(
            failed_signal_pending=True, state=DeliveryState.FAILED, finished_at__lt=cutoff
        )
        .select_related("message")
        .defer("message__body")[:STEP]
    )


def signals_sent(ids: Iterable[int]) -> None:
    """Note that ``delivery_failed`` was sent for the deliveries ``ids``."""
    Delivery.objects.filter(id__in=list(ids), failed_signal_pending=True).update(
        failed_signal_pending=False
    )

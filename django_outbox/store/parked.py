"""Parked deliveries let go early: what a worker parked for a reason that has ended.

A parked delivery is ``queued`` with a later ``next_attempt_at`` and no message on the
broker (``dispatched_at`` empty), its ``last_error`` saying why it waits.  When the
reason ends before the time it was parked for (its host resumed by hand), the rows are
made due now and handed back to be published.
"""

from __future__ import annotations

from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.queries import Lanes, by_lane


def release_parked(host: str, reason: str) -> Lanes:
    """Make due now the queued deliveries to ``host`` parked with ``reason`` (the start of
    their ``last_error``), marked published; the ids to publish, by lane."""
    now = timezone.now()
    parked = Delivery.objects.filter(
        host=host,
        state=DeliveryState.QUEUED,
        next_attempt_at__gt=now,
        last_error__startswith=reason,
    )
    rows = list(parked.values_list("id", "lane"))
    Delivery.objects.filter(
        id__in=[pk for pk, _ in rows], state=DeliveryState.QUEUED, last_error__startswith=reason
    ).update(next_attempt_at=now, dispatched_at=now)
    return by_lane(rows)

"""Per-destination gauges, read from the database for the metrics alone.

Which hosts wait longest: the age of each host's oldest due delivery, the worst
:data:`TOP` only, so that the label set stays bounded.  Read at most every
``OUTBOX_METRICS_TTL`` seconds per process, as the snapshot is.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Min
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from django_outbox.status.fresh import Fresh

#: Hosts exposed with a ``host`` label at most.
TOP = 10


@dataclass(frozen=True)
class DestinationGauges:
    """What :func:`destination_gauges` read."""

    #: ``(host, seconds its oldest due delivery has waited)``, the longest first.
    backlog_ages: list[tuple[str, float]]


def read_destination_gauges() -> DestinationGauges:
    """Read the gauges now: one grouped query over the due deliveries."""
    now = timezone.now()
    due = Delivery.objects.filter(state=DeliveryState.QUEUED, next_attempt_at__lte=now)
    oldest = (
        due.order_by().values("host").annotate(oldest=Min("next_attempt_at")).order_by("oldest")
    )
    ages = [(row["host"], (now - row["oldest"]).total_seconds()) for row in oldest[:TOP]]
    return DestinationGauges(ages)


_gauges = Fresh(read_destination_gauges)


def destination_gauges(ttl: float) -> DestinationGauges:
    """:func:`read_destination_gauges` at most ``ttl`` seconds old."""
    return _gauges.get(ttl)

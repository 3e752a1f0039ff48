"""Per-destination and payment gauges, read from the database for the metrics alone.

Which hosts wait longest (the age of each host's oldest due delivery, the worst
:data:`TOP` only, so that the label set stays bounded), and what paid push has
paid (attempts by state, amounts, fees, kept as long as their deliveries).  Read at
most every ``OUTBOX_METRICS_TTL`` seconds per process, as the snapshot is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, Min, Sum
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.models import Delivery, DeliveryState
from django_outbox.payments.models import PaymentAttempt
from django_outbox.status.fresh import Fresh

#: Hosts exposed with a ``host`` label at most.
TOP = 10


@dataclass(frozen=True)
class PaymentTotals:
    """Payment attempts in the table, by state: how many, their price and their fees."""

    count: dict[str, int] = field(default_factory=dict)
    amount_msat: dict[str, int] = field(default_factory=dict)
    fee_msat: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DestinationGauges:
    """What :func:`destination_gauges` read."""

    #: ``(host, seconds its oldest due delivery has waited)``, the longest first.
    backlog_ages: list[tuple[str, float]]
    #: ``None`` when paid push is off.
    payments: PaymentTotals | None


def read_destination_gauges() -> DestinationGauges:
    """Read the gauges now: one grouped query over the due deliveries, one over payments."""
    now = timezone.now()
    due = Delivery.objects.filter(state=DeliveryState.QUEUED, next_attempt_at__lte=now)
    oldest = (
        due.order_by().values("host").annotate(oldest=Min("next_attempt_at")).order_by("oldest")
    )
    ages = [(row["host"], (now - row["oldest"]).total_seconds()) for row in oldest[:TOP]]
    payments = None
    if conf.PAYMENTS is not None:
        rows = (
            PaymentAttempt.objects.order_by()
            .values("state")
            .annotate(n=Count("id"), amount=Sum("amount_msat"), fee=Sum("fee_msat"))
        )
        payments = PaymentTotals(
            count={row["state"]: row["n"] for row in rows},
            amount_msat={row["state"]: row["amount"] or 0 for row in rows},
            fee_msat={row["state"]: row["fee"] or 0 for row in rows},
        )
    return DestinationGauges(ages, payments)


_gauges = Fresh(read_destination_gauges)


def destination_gauges(ttl: float) -> DestinationGauges:
    """:func:`read_destination_gauges` at most ``ttl`` seconds old."""
    return _gauges.get(ttl)

"""Paid push's gauges: payment attempts kept, by state, with their prices and fees.

Read from the database at most every ``OUTBOX_METRICS_TTL`` seconds per process
(as the status snapshot is), and exposed by the package's collector through the
extension seam.  Imported only when ``prometheus-client`` is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db.models import Count, Sum
from prometheus_client.core import GaugeMetricFamily, Metric

from django_outbox.payments.models import PaymentAttempt, PaymentState
from django_outbox.status.fresh import Fresh


@dataclass(frozen=True)
class PaymentTotals:
    """Payment attempts in the table, by state: how many, their price and their fees."""

    count: dict[str, int] = field(default_factory=dict)
    amount_msat: dict[str, int] = field(default_factory=dict)
    fee_msat: dict[str, int] = field(default_factory=dict)


def read_payment_totals() -> PaymentTotals:
    """The totals now, in one grouped query."""
    rows = (
        PaymentAttempt.objects.order_by()
        .values("state")
        .annotate(n=Count("id"), amount=Sum("amount_msat"), fee=Sum("fee_msat"))
    )
    return PaymentTotals(
        count={row["state"]: row["n"] for row in rows},
        amount_msat={row["state"]: row["amount"] or 0 for row in rows},
        fee_msat={row["state"]: row["fee"] or 0 for row in rows},
    )


_totals = Fresh(read_payment_totals)


def payment_families(ttl: float) -> Iterator[Metric]:
    """``outbox_payments``, ``outbox_payments_amount_msat`` and ``outbox_payments_fee_msat``,
    each by state and each state exposed even while zero, from totals at most ``ttl``
    seconds old."""
    totals = _totals.get(ttl)
    described = (
        ("outbox_payments", "Payment attempts kept, by state.", totals.count),
        ("outbox_payments_amount_msat", "Their prices (msat), by state.", totals.amount_msat),
        ("outbox_payments_fee_msat", "Their routing fees (msat), by state.", totals.fee_msat),
    )
    for name, help_text, values in described:
        family = GaugeMetricFamily(name, help_text, labels=["state"])
        for state in PaymentState.values:
            family.add_metric([state], values.get(state, 0))
        yield family

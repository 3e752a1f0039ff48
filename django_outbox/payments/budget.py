"""A sender's daily payment budget: one row per sender and day, raised and lowered by
conditional ``UPDATE`` statements, so that every worker sees one total and none can
spend past it.  Only :mod:`~django_outbox.payments.ledger` calls these, as it stores,
settles and refuses payments.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from django.db.models import F

from django_outbox.payments.lookups import day_of
from django_outbox.payments.models import PaymentBudget


def reserve(sender: str, day: date, amount: int, budget: int) -> bool:
    """Add ``amount`` to the sender's spending on ``day`` if it stays within ``budget``.

    The day's row is written only when the conditional update found none to raise (no
    row yet, or not enough left): one statement per payment, not two."""
    within = PaymentBudget.objects.filter(sender=sender, day=day, spent_msat__lte=budget - amount)
    if within.update(spent_msat=F("spent_msat") + amount):
        return True
    new = PaymentBudget(sender=sender, day=day)
    PaymentBudget.objects.bulk_create([new], ignore_conflicts=True)
    return bool(within.update(spent_msat=F("spent_msat") + amount))


def spend(sender: str, day: date, amount: int) -> None:
    """Add ``amount`` to the sender's spending on ``day`` whatever the budget: a payment
    given back as failed that the node later reports made."""
    PaymentBudget.objects.filter(sender=sender, day=day).update(spent_msat=F("spent_msat") + amount)


def give_back(sender: str, day: date, amount: int) -> None:
    """Take ``amount`` off the sender's spending on ``day`` (a reservation not spent)."""
    if amount > 0:
        PaymentBudget.objects.filter(sender=sender, day=day, spent_msat__gte=amount).update(
            spent_msat=F("spent_msat") - amount
        )


def seconds_to_next_day(now: datetime) -> float:
    """Seconds from ``now`` to the next budget day (midnight UTC): how long a delivery
    over the day's budget is held."""
    midnight = datetime.combine(day_of(now) + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return (midnight - now).total_seconds()

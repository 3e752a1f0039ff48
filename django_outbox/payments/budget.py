"""A sender's daily payment budget: one row per sender and day, raised and lowered by
conditional ``UPDATE`` statements, so that every worker sees one total and none can
spend past it.  Only :mod:`~django_outbox.payments.ledger` calls these, as it stores,
settles and refuses payments.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, date, datetime, timedelta

from django.db.models import F

from django_outbox.payments.lookups import day_of
from django_outbox.payments.models import PaymentBudget


def lock_day(senders: Collection[str], day: date) -> None:
    """Lock the budget rows of ``senders`` on ``day`` (made when missing) until the
    transaction ends, the ledger's first lock in each of its transactions.

    Two workers' ledgers may store payment attempts for one host at once, and a stored
    attempt holds its host's slot (a unique key) until its transaction ends.  Had one
    raised the budget and then met the other's new attempt in its slot, while the other
    went on to raise the same budget, each would wait for the other (a deadlock, which
    PostgreSQL ends by rolling one back).  Taken first, the budget row makes a second
    ledger wait before it has stored anything.  On SQLite, whose writers take turns,
    the ``FOR UPDATE`` is left out."""
    if not senders:
        return
    rows = PaymentBudget.objects.select_for_update().filter(day=day).order_by("sender")
    missing = set(senders) - set(rows.filter(sender__in=senders).values_list("sender", flat=True))
    if missing:
        made = [PaymentBudget(sender=sender, day=day) for sender in sorted(missing)]
        PaymentBudget.objects.bulk_create(made, ignore_conflicts=True)
        list(rows.filter(sender__in=missing).values_list("id", flat=True))


def reserve(sender: str, day: date, amount: int, budget: int) -> bool:
    """Add ``amount`` to the sender's spending on ``day`` if it stays within ``budget``.

    The day's row is written only when the conditional update found none to raise (no
    row yet, or not enough left): one statement per payment, not two (after
    :func:`lock_day`, the row is there)."""
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

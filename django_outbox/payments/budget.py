"""A sender's daily payment budget: one row per sender and day, raised and lowered by
conditional ``UPDATE`` statements, so that every worker sees one total and none can
spend past it.  Only :mod:`~django_outbox.payments.ledger` calls these, as it stores,
settles and refuses payments; each is one statement written out
(:mod:`~django_outbox.payments.statements`), as a paid delivery runs two or three.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, date, datetime, timedelta

from django.db import connection

from django_outbox.payments.lookups import day_of
from django_outbox.payments.models import PaymentBudget
from django_outbox.payments.statements import as_date, execute, fetch
from django_outbox.store.statement_parts import marks, name


def lock_day(senders: Collection[str], day: date) -> None:
    """Lock the budget rows of ``senders`` on ``day`` (made when missing) until the
    transaction ends, the ledger's first lock in each of its transactions.

    Two workers' ledgers may store payment attempts for one host at once, and a stored
    attempt holds its host's slot (a unique key) until its transaction ends.  Had one
    raised the budget and then met the other's new attempt in its slot, while the other
    went on to raise the same budget, each would wait for the other (a deadlock, which
    PostgreSQL ends by rolling one back).  Taken first, the budget row makes a second
    ledger wait before it has stored anything.  A delivery's own store
    (:func:`~django_outbox.payments.opening.store_now`, one sender) takes the same row
    first with its reservation instead.  On SQLite, whose writers take turns,
    the ``FOR UPDATE`` is left out."""
    if not senders:
        return
    missing = set(senders) - _locked(senders, day)
    if missing:
        made = [PaymentBudget(sender=sender, day=day) for sender in sorted(missing)]
        PaymentBudget.objects.bulk_create(made, ignore_conflicts=True)
        _locked(missing, day)


def _locked(senders: Collection[str], day: date) -> set[str]:
    """Lock the rows of ``senders`` on ``day`` that exist, in the order of their senders;
    which senders have one."""
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    sql = (
        f"SELECT sender FROM {name(PaymentBudget)} WHERE day = %s "
        f"AND sender IN ({marks(senders)}) ORDER BY sender{lock}"
    )
    return {sender for (sender,) in fetch(sql, [as_date(day), *senders])}


def reserve(sender: str, day: date, amount: int, budget: int) -> bool:
    """Add ``amount`` to the sender's spending on ``day`` if it stays within ``budget``.

    The day's row is written only when the conditional update found none to raise (no
    row yet, or not enough left): one statement per payment, not two (after
    :func:`lock_day`, the row is there)."""
    if _raise(sender, day, amount, budget - amount):
        return True
    PaymentBudget.objects.bulk_create(
        [PaymentBudget(sender=sender, day=day)], ignore_conflicts=True
    )
    return _raise(sender, day, amount, budget - amount)


def _raise(sender: str, day: date, amount: int, at_most: int | None = None) -> bool:
    """Add ``amount`` to the row of ``sender`` on ``day``, only if it was ``at_most`` or
    less (None: whatever it was); whether a row was raised."""
    sql = (
        f"UPDATE {name(PaymentBudget)} SET spent_msat = spent_msat + %s "
        "WHERE sender = %s AND day = %s"
    )
    params: list[object] = [amount, sender, as_date(day)]
    if at_most is not None:
        sql += " AND spent_msat <= %s"
        params.append(at_most)
    return execute(sql, params) > 0


def spend(sender: str, day: date, amount: int) -> None:
    """Add ``amount`` to the sender's spending on ``day`` whatever the budget: a payment
    given back as failed that the node later reports made."""
    _raise(sender, day, amount)


def give_back(sender: str, day: date, amount: int) -> None:
    """Take ``amount`` off the sender's spending on ``day`` (a reservation not spent)."""
    if amount > 0:
        sql = (
            f"UPDATE {name(PaymentBudget)} SET spent_msat = spent_msat - %s "
            "WHERE sender = %s AND day = %s AND spent_msat >= %s"
        )
        execute(sql, [amount, sender, as_date(day), amount])


def seconds_to_next_day(now: datetime) -> float:
    """Seconds from ``now`` to the next budget day (midnight UTC): how long a delivery
    over the day's budget is held."""
    midnight = datetime.combine(day_of(now) + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return (midnight - now).total_seconds()

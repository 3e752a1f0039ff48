"""Operations on deliveries that combine a change of state, its signals and publishing.

The public API, the admin, the sweeper and the recovery pass all give up,
take back and requeue through these, so that every way of doing it sends the
same signals and frees the same successors.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from django_outbox.broker.publish import publish, publish_on_commit
from django_outbox.models import Delivery
from django_outbox.signals.sending import send_failed
from django_outbox.store import give_ups, reclaim, transitions

#: The error of a delivery failed because every attempt's worker was lost.
LOST_EVERY_ATTEMPT = "the worker was lost during every attempt"


def give_up(ids: Iterable[int], reason: str, *, deadline: bool = False) -> int:
    """Fail the live deliveries among ``ids`` now; returns how many changed.

    ``delivery_failed`` is sent for each once the change is committed (and sent
    again by a recovery pass if this process dies first), and the deliveries
    waiting behind them with their ordering key are queued.
    """
    rows = give_ups.give_up(ids, reason, deadline=deadline)
    send_failed(rows)
    give_ups.signals_sent(row.pk for row in rows)
    publish(transitions.promote_successors((row.ordering_key, row.inbox) for row in rows))
    return len(rows)


def take_back(abandoned: QuerySet[Delivery], error: str) -> int:
    """Queue again and publish the claimed deliveries ``abandoned`` by a lost worker,
    failing those that have spent every attempt; returns how many (a step's worth)."""
    spent = reclaim.spent(abandoned)
    failed = give_up(spent, LOST_EVERY_ATTEMPT) if spent else 0
    lanes = reclaim.requeue_abandoned(abandoned, error)
    publish(lanes)
    return failed + sum(map(len, lanes.values()))


def resend_failed_signals(older_than: float) -> int:
    """Send ``delivery_failed`` for give-ups whose signal a lost process never sent."""
    rows = give_ups.pending_signals(older_than)
    send_failed(rows)
    give_ups.signals_sent(row.pk for row in rows)
    return len(rows)


def requeue(ids: Iterable[int]) -> int:
    """Queue the finished deliveries among ``ids`` again; returns how many.

    They are published once the caller's transaction commits.
    """
    ids = list(ids)
    lanes, count = transitions.requeue(ids)
    publish_on_commit(lanes)
    return count

"""Operations on deliveries that combine a change of state, its signals and publishing.

The public API, the admin and the sweeper all give up and requeue through
these, so that every way of doing it sends the same signals and frees the
same successors.
"""

from __future__ import annotations

from collections.abc import Iterable

from django_outbox.dispatch import publish, publish_on_commit
from django_outbox.notify import send_failed
from django_outbox.store import transitions


def give_up(ids: Iterable[int], reason: str, *, deadline: bool = False) -> int:
    """Fail the live deliveries among ``ids`` now; returns how many changed.

    ``delivery_failed`` is sent for each once the change is committed, and the
    deliveries waiting behind them with their ordering key are queued.
    """
    rows = transitions.give_up(ids, reason, deadline=deadline)
    send_failed(rows)
    publish(transitions.promote_successors((row.ordering_key, row.inbox) for row in rows))
    return len(rows)


def requeue(ids: Iterable[int]) -> int:
    """Queue the finished deliveries among ``ids`` again; returns how many.

    They are published once the caller's transaction commits.
    """
    ids = list(ids)
    lanes, count = transitions.requeue(ids)
    publish_on_commit(lanes)
    return count

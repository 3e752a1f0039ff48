"""Ending holds early: deliveries parked for a host, made due now.

A delivery held for its host (paused by hand, or held by an extension) is parked in
the database until its hold ends (:func:`~django_outbox.store.transitions.park`):
``queued``, due later, with no message on the broker and its ``last_error`` saying why
it waits.  When what it waited for happens sooner (the host resumed, or what an
extension waited for came), :func:`release_parked` makes it due at once and hands back
its id to publish, rather than leave it to its hold timer and the recovery pass;
:func:`due_now` hands back those of a host already due, to publish ahead of the rest.
Only rows still queued and parked for the given reasons are touched, so a delivery
that moved on meanwhile is left alone.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.db import connection
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.queries import STEP, Lanes, by_lane


def release_parked(
    host: str,
    reasons: Collection[str] = (),
    limit: int | None = None,
    *,
    starting: str = "",
) -> Lanes:
    """Make due now the queued deliveries to ``host`` parked for one of ``reasons``
    (their ``last_error``), or with a ``last_error`` ``starting`` so, and not due yet:
    the ``limit`` due first (all, up to :data:`~django_outbox.store.queries.STEP`, when
    None).  Their ids by lane, to publish: only the rows the update changed, so one
    that moved on meanwhile is left out; they are marked dispatched now, as any
    delivery published.

    One ``UPDATE ... RETURNING``, written out: a per-message host's every payment that
    ends asks it, and mostly nothing is parked (built by the ORM, the empty answer cost
    about 1 ms of CPU)."""
    count = STEP if limit is None else max(0, limit)
    if count == 0:
        return {}
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    parked = "host = %s AND state = %s AND next_attempt_at > %s AND "
    params: list[Any] = [host, DeliveryState.QUEUED.value, now]
    if starting:
        parked += "SUBSTR(last_error, 1, %s) = %s"
        params += [len(starting), starting]
    elif reasons:
        parked += f"last_error IN ({', '.join(['%s'] * len(reasons))})"
        params += list(reasons)
    else:
        return {}
    table = connection.ops.quote_name(Delivery._meta.db_table)
    first = f"SELECT id FROM {table} WHERE {parked} ORDER BY next_attempt_at, id LIMIT %s"
    sql = (
        f"UPDATE {table} SET next_attempt_at = %s, dispatched_at = %s "
        f"WHERE id IN ({first}) AND {parked} RETURNING id, lane"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [now, now, *params, count, *params])
        return by_lane(cursor.fetchall())


def due_now(host: str, limit: int = STEP) -> list[int]:
    """The ids of the ``limit`` queued deliveries to ``host`` due first among those due
    now, marked dispatched now: to publish ahead of their lanes' backlogs when what
    they wait for has just become quick (a host learnt to be paid per message)."""
    now = timezone.now()
    due = Delivery.objects.filter(host=host, state=DeliveryState.QUEUED, next_attempt_at__lte=now)
    ids = list(due.order_by("next_attempt_at", "id").values_list("id", flat=True)[:limit])
    if ids:
        Delivery.objects.filter(id__in=ids).update(dispatched_at=now)
    return ids

"""Deliveries held for their host that come back before their hold ends.

A delivery held for its host (an open breaker, a probe under way, the deliveries that
await an answer) is queued with ``next_attempt_at`` at the end of its hold and a Celery
countdown to match: that end is the upper bound, which nothing here can lengthen, so a
crash between two steps loses nothing.  When the breaker store says that a success freed
the host while holds run there (:meth:`~django_outbox.breakers.BreakerStore.record`
answered True), the recorder that saved the success calls :func:`release_held`: a few of
the host's held deliveries, those due first, become due at random within
:data:`RELEASE_SPREAD` seconds.  Each of those that succeeds frees the host again, so
the host's backlog comes back in steps that grow with its good answers (one probe, then
``OUTBOX_RELEASE_STEP``, then that many per success) and stops at its first failure.
Throttled deliveries (a ``429``) are not released: they wait the time asked.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from django_outbox.breakers.policy import releasable_errors
from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.queries import Lanes

#: Seconds over which the deliveries of one release come due, each at random.
RELEASE_SPREAD = 1.0


def release_held(hosts: Iterable[str], threshold: int, step: int) -> dict[float, Lanes]:
    """Make up to ``step`` held deliveries of each host in ``hosts`` (per time it is
    named) due within :data:`RELEASE_SPREAD` seconds; the ids to publish, by countdown
    (seconds) and lane.

    ``threshold`` is the breakers' (their holds' ``last_error`` names it).  Each row
    changes only while it is still queued with the due time read, so a release racing a
    claim or another release changes nothing twice; ``dispatched_at`` is stamped, and a
    row whose message is then lost is published again by the recovery pass, or by its
    hold's own countdown at the latest.  The statements are written out: every batch
    with a success at such a host asks, and mostly finds nothing held.
    """
    now = timezone.now()
    adapt = connection.ops.adapt_datetimefield_value
    errors = releasable_errors(threshold)
    table = connection.ops.quote_name(Delivery._meta.db_table)
    first = (
        f"SELECT id, lane, next_attempt_at FROM {table} WHERE host = %s AND state = %s "
        f"AND last_error IN ({', '.join(['%s'] * len(errors))}) AND next_attempt_at > %s "
        "ORDER BY next_attempt_at, id LIMIT %s"
    )
    # Each row its own delay: a row is made due only at the time it was read with.
    due_later = (
        f"UPDATE {table} SET next_attempt_at = %s, dispatched_at = %s "
        "WHERE id = %s AND state = %s AND next_attempt_at = %s"
    )
    queued = DeliveryState.QUEUED.value
    released: dict[float, Lanes] = {}
    with connection.cursor() as cursor:
        for host, times in Counter(hosts).items():
            cursor.execute(first, [host, queued, *errors, adapt(now), step * times])
            for pk, lane, due in cursor.fetchall():
                delay = round(random.random() * RELEASE_SPREAD, 1)
                later = adapt(now + timedelta(seconds=delay))
                cursor.execute(due_later, [later, adapt(now), pk, queued, due])
                if cursor.rowcount:
                    released.setdefault(delay, {}).setdefault(lane, []).append(pk)
    return released

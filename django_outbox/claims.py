"""Taking deliveries for one attempt, so that no two workers send one at once.

A claim is one conditional UPDATE: only rows still ``queued`` and due are
taken, the attempt is counted there and then, and the rows are stamped with
a token unique to this claim and a lease.  A duplicated Celery message finds
nothing left to take; a worker that dies leaves a lease that the sweeper
reclaims, and the attempts counted at claim time stop a delivery that kills
its worker every time from looping for ever.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.models import Delivery, DeliveryState

_counter = itertools.count()


def new_token() -> str:
    """A claim token unique across hosts, processes and claims."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{next(_counter)}"


@dataclass(frozen=True)
class Claimed:
    """One claimed delivery, as much of it as sending needs."""

    id: int
    message_id: int
    inbox: str
    host: str
    via: list[str]
    lane: str
    attempts: int


def claim(ids: Sequence[int], token: str) -> list[Claimed]:
    """Claim whichever of ``ids`` are queued and due, counting one attempt each.

    One ``UPDATE ... RETURNING`` statement (PostgreSQL, and SQLite 3.35+),
    so a claim costs one round trip.
    """
    if not ids:
        return []
    now = timezone.now()
    table = connection.ops.quote_name(Delivery._meta.db_table)
    marks = ", ".join(["%s"] * len(ids))
    sql = (
        f"UPDATE {table} SET state = %s, claimed_by = %s, lease_until = %s, "
        f"attempts = attempts + 1 WHERE id IN ({marks}) AND state = %s "
        f"AND next_attempt_at <= %s "
        f"RETURNING id, message_id, inbox, host, via, lane, attempts"
    )
    lease = now + timedelta(seconds=conf.LEASE_SECONDS)
    params: list[Any] = [
        DeliveryState.SENDING.value,
        token,
        _db_time(lease),
        *ids,
        DeliveryState.QUEUED.value,
        _db_time(now),
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [
        Claimed(row[0], row[1], row[2], row[3], _json_list(row[4]), row[5], row[6]) for row in rows
    ]


def _db_time(moment: datetime) -> Any:
    """``moment`` as the database adapter stores it (SQLite keeps text)."""
    return connection.ops.adapt_datetimefield_value(moment)


def _json_list(value: object) -> list[str]:
    """The ``via`` column as a list: PostgreSQL decodes JSON, SQLite returns text."""
    decoded = json.loads(value) if isinstance(value, str) else value
    return [str(url) for url in decoded] if isinstance(decoded, list) else []


def not_yet_due(ids: Sequence[int], horizon: float) -> tuple[list[int], datetime | None]:
    """Queued ids that come due within ``horizon`` seconds, and the earliest due time."""
    now = timezone.now()
    rows = list(
        Delivery.objects.filter(
            id__in=ids,
            state=DeliveryState.QUEUED,
            next_attempt_at__gt=now,
            next_attempt_at__lte=now + timedelta(seconds=horizon),
        ).values_list("id", "next_attempt_at")
    )
    if not rows:
        return [], None
    return [row[0] for row in rows], min(row[1] for row in rows)

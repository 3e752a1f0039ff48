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
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F
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
    """Claim whichever of ``ids`` are queued and due, counting one attempt each."""
    now = timezone.now()
    taken = Delivery.objects.filter(
        id__in=ids, state=DeliveryState.QUEUED, next_attempt_at__lte=now
    ).update(
        state=DeliveryState.SENDING,
        claimed_by=token,
        lease_until=now + timedelta(seconds=conf.LEASE_SECONDS),
        attempts=F("attempts") + 1,
    )
    if not taken:
        return []
    rows = Delivery.objects.filter(
        id__in=ids, claimed_by=token, state=DeliveryState.SENDING
    ).values_list("id", "message_id", "inbox", "host", "via", "lane", "attempts")
    return [Claimed(*row) for row in rows]


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

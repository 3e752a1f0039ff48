"""The task's loop: claim what the engine has room for, and hand it over.

A ``deliver`` task's ids are claimed a part at a time, as the process's engine has room
(:func:`run_deliveries`), so that a process holds no claims it is not about to send;
while it waits, due priority-lane deliveries are claimed straight from the database.
Each claim goes through :meth:`~django_outbox.worker.process.WorkerProcess.prepared`,
which gives every row an outcome on every path, and a claim whose answer the database
never gave is given back once it answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime

from django.db import DatabaseError
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.models import Lane
from django_outbox.store.claim_rows import new_token
from django_outbox.store.outages import DATABASE_OUTAGES
from django_outbox.store.queries import due_in_lane, not_yet_due
from django_outbox.store.transitions import claim
from django_outbox.values.claimed import ClaimedRow
from django_outbox.worker.attempt import Job
from django_outbox.worker.process import ProcessUnfit, WorkerProcess, give_back, this_process
from django_outbox.worker.recorder import Release

logger = logging.getLogger("django_outbox.worker")

#: Seconds between looks for priority-lane work while a task waits for room.
_URGENT_POLL = 0.05
#: Seconds a task waits for room at most: it then hands over the rest anyway (the
#: send-by time still protects their leases), so that a Celery process is never
#: held for long, not even by an engine that has stopped making progress.
_ROOM_WAIT_LIMIT = 10.0
#: More ids than any task carries.
_NO_LIMIT = 1 << 30


def run_deliveries(
    ids: Sequence[int],
    *,
    wait: bool = True,
    urgent: bool = False,
    published: datetime | None = None,
) -> tuple[list[int], float] | None:
    """Claim ``ids`` and start sending them.

    With ``wait``, the caller claims only as many as the engine has room for,
    and waits for room before claiming more, so that a process holds no claims
    it is not about to send (what a killed process strands is what it was
    sending, and what fits in its engine's lines); meanwhile it takes
    priority-lane deliveries that are due straight from the database, since a
    Celery process blocked here cannot take the priority lane's messages.
    ``urgent`` ids (the priority lane's) are claimed at once.  Returns the ids
    that are queued but not due yet with the seconds until the first is, for the
    task to retry with, or ``None``; with ``published`` (when the task's message was
    first published), only those not dispatched again since, whose newer message
    retries them itself (a delivery held again and again while its host is paid
    would otherwise gather one more retrying message per hold).  Raises
    :class:`ProcessUnfit` once the process cannot go on (before claiming more).
    """
    process = this_process()
    token = new_token()
    pending = list(ids)
    taken: set[int] = set()
    refused: list[Job] = []
    give_up_waiting = time.monotonic() + _ROOM_WAIT_LIMIT
    while pending:
        room = (
            _room(process, give_up_waiting, len(pending)) if wait and not urgent else len(pending)
        )
        claimed = _claim(process, pending[:room], token)
        pending = pending[room:]
        taken.update(row.id for row in claimed)
        if claimed:
            refused += process.engine.submit(process.prepared(claimed))
    give_back([job.row for job in refused])
    left = [i for i in ids if i not in taken]
    waiting, due = not_yet_due(left, conf.COUNTDOWN_LIMIT, published)
    if due is None:
        return None
    return waiting, max(0.0, (due - timezone.now()).total_seconds())


def _claim(process: WorkerProcess, ids: list[int], token: str) -> list[ClaimedRow]:
    """:func:`~django_outbox.store.transitions.claim` by a process that is whole; when the
    database goes away meanwhile, what the claim may have taken is given back through
    the recorder once it is back (and the error raised, for the task to retry)."""
    if process.supervisor.broken:
        raise ProcessUnfit(process.supervisor.broken)
    try:
        return claim(ids, token)
    except DATABASE_OUTAGES:
        process.recorder.put(Release(tuple(ids), token))
        raise


def _room(process: WorkerProcess, give_up_waiting: float, left: int) -> int:
    """How many of the ``left`` deliveries to claim next: once the engine has room
    for a quarter of its concurrency (or for all that is left), that room, so that
    a busy engine is not fed one claim per delivery; after ``give_up_waiting``
    (monotonic), everything left.  Urgent work found while waiting is claimed and
    started meanwhile."""
    engine = process.engine
    want = min(left, max(1, conf.CONCURRENCY // 4))
    while not engine.wait_for_room(_URGENT_POLL, want):
        if time.monotonic() > give_up_waiting:
            logger.warning("no room in the engine for %ss; claiming the rest", _ROOM_WAIT_LIMIT)
            return _NO_LIMIT
        give_back([job.row for job in engine.submit(_urgent_jobs(process))])
    return max(want, engine.room())


def _urgent_jobs(process: WorkerProcess) -> list[Job]:
    """Claim the priority-lane deliveries that are due; their jobs, to start at once.

    Only a shortcut: their own Celery messages remain, so a database error here is
    logged and the caller goes on handing over the deliveries it has claimed.
    """
    try:
        due = due_in_lane(Lane.PRIORITY, conf.CHUNK_SIZE)
        claimed = _claim(process, due, new_token()) if due else []
    except DatabaseError:
        logger.warning("could not look for priority-lane deliveries", exc_info=True)
        return []
    return process.prepared(claimed) if claimed else []

"""The Celery tasks.  The package routes them itself: no ``task_routes`` needed.

``deliver`` carries up to ``OUTBOX_CHUNK_SIZE`` delivery ids in its lane's
queue; ``expand`` writes the rows of a large fan-out; ``sweep`` runs on beat
(the package adds it to the schedule, every ``OUTBOX_SWEEP_INTERVAL``
seconds).  :mod:`django_outbox.broker.publish` publishes them by name.  Each pool
process beats from the moment it starts (:mod:`django_outbox.worker.heartbeat`)
until it stops.

Two kinds of retry, each with its own tool.  A database that cannot be reached
is retried by ``autoretry_for`` with an exponential backoff (2 s doubling to
60 s).  Deliveries that are queued but not due yet (a ``Retry-After`` or a
breaker's hold stored on the row, at most ``OUTBOX_COUNTDOWN_LIMIT`` away) are
retried with ``self.retry(countdown=...)``, the wait until the first comes due:
the row, not the task, holds the backoff, so it honours ``Retry-After`` and the
batch's deadline whoever sends it.  That retry is published and the task returns
(``throw=False``): a ``Retry`` raised makes Celery copy the traceback into an
``ExceptionInfo``, which on Python 3.11+ lists the code positions of every frame's
function, milliseconds per retry, and deliveries parked while their host is paid
retry often.  It is logged at ``INFO`` (``not due yet``); Celery's ``task_retry``
signal is not sent for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Reject
from celery.signals import (
    beat_init,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutdown,
)
from django.db import close_old_connections

from django_outbox.broker.backlog import read_sent
from django_outbox.broker.publish import DELIVER, EXPAND, SWEEP
from django_outbox.conf import conf
from django_outbox.extensions.registry import active
from django_outbox.models import Lane
from django_outbox.sending.fanout import expand as expand_message
from django_outbox.store.outages import DATABASE_OUTAGES
from django_outbox.upkeep.sweeper import sweep as run_sweep
from django_outbox.worker.claiming import run_deliveries
from django_outbox.worker.lifecycle import start_worker_process, stop_worker_process, sweep_part
from django_outbox.worker.process import ProcessUnfit

logger = logging.getLogger("django_outbox.worker")


class OutboxTask(Task):  # type: ignore[type-arg]
    """A task that drops its database connection when Django would after a request."""

    def after_return(self, *args: Any, **kwargs: Any) -> None:
        """Close the connection if it is broken or older than ``CONN_MAX_AGE``.

        Celery's Django fix-up closes it after every task unless
        ``CELERY_DB_REUSE_MAX`` is set; with it set, this keeps Django's rules.
        """
        close_old_connections()

    def on_retry(self, *args: Any, **kwargs: Any) -> None:
        """Close the connection as :meth:`after_return` does, which Celery skips for a
        retry: a connection a database restart broke would fail every retry after."""
        close_old_connections()


def _retried_task(name: str) -> Callable[[Callable[..., Any]], OutboxTask]:
    """The decorator of a task that ``autoretry_for`` retries while the database is away."""
    return shared_task(
        name=name,
        bind=True,
        base=OutboxTask,
        acks_late=True,
        # A pool process killed mid-task: its message goes back to the queue at
        # once (else it is acknowledged and lost); the claim keeps what the dead
        # process had claimed from being claimed again while it counts as alive.
        reject_on_worker_lost=True,
        ignore_result=True,
        autoretry_for=DATABASE_OUTAGES,
        retry_backoff=2,
        retry_backoff_max=60,
        retry_jitter=False,
        max_retries=None,
    )


@_retried_task(DELIVER)
def deliver(self: OutboxTask, ids: list[int]) -> None:
    """Claim the deliveries ``ids`` that are due and send them (the priority lane's
    at once, the others as the engine has room).  A process that cannot go on hands
    the message back to the queue for another."""
    if not self.request.is_eager:
        # The threads pool starts no process (no worker_process_init): start from here,
        # before the first claim.  Elsewhere the process's parts already run.
        start_worker_process()
    lane = (self.request.delivery_info or {}).get("routing_key")
    # Its retries keep the first message's headers, and so its publish time.
    sent = read_sent(self.request.headers)
    try:
        later = run_deliveries(
            ids, urgent=lane == Lane.PRIORITY, published=sent.at if sent else None
        )
    except ProcessUnfit as unfit:
        raise Reject(str(unfit), requeue=True) from unfit
    if later is not None:
        not_due, countdown = later
        # Run eagerly (apply()), the retry must be raised: apply() runs it.
        self.retry(args=(not_due,), countdown=countdown, throw=bool(self.request.is_eager))
        logger.info("%d deliveries not due yet: retried in %.3f s", len(not_due), countdown)


@_retried_task(EXPAND)
def expand(self: OutboxTask, message_id: int) -> int:
    """Write and dispatch the deliveries of a large fan-out."""
    return expand_message(message_id)


@shared_task(base=OutboxTask, name=SWEEP, ignore_result=True)
def sweep() -> dict[str, int]:
    """Run one sweep: dispatch due and lost work, reclaim leases, prune."""
    return run_sweep(sweep_part())


@beat_init.connect
def _schedule_sweep(sender: Any, **kwargs: Any) -> None:
    entries = sender.scheduler.schedule
    if SWEEP not in entries:
        sender.scheduler.update_from_dict(
            {
                SWEEP: {
                    "task": SWEEP,
                    "schedule": conf.SWEEP_INTERVAL,
                    "options": {"queue": "outbox", "expires": conf.SWEEP_INTERVAL},
                }
            }
        )


@worker_init.connect
def _start_extensions(**kwargs: Any) -> None:
    # In the main process, before the pool forks: no delivery waits for what they load.
    for extension in active():
        extension.worker_starting()


@worker_process_init.connect
def _start_process(**kwargs: Any) -> None:
    # Heart, engine, recorder and transport made as the pool process starts, so that the
    # first delivery after a (re)start does not wait for them.
    start_worker_process()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _stop_engine(**kwargs: Any) -> None:
    stop_worker_process(timeout=conf.STOP_TIMEOUT)

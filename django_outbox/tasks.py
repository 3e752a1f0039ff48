"""The Celery tasks.  The package routes them itself: no ``task_routes`` needed.

``deliver`` carries up to ``OUTBOX_CHUNK_SIZE`` delivery ids in the lane's
queue; ``expand`` writes the rows of a large fan-out; ``sweep`` runs on beat
(the package adds it to the schedule, every ``OUTBOX_SWEEP_INTERVAL``
seconds).  ``deliver`` retries through ``autoretry_for`` with its own delay:
the wait until the earliest not-yet-due row of its message comes due (a
``Retry-After`` or breaker hold stored on the row), or an exponential pause
while the database is unreachable.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from celery import Task, shared_task
from celery.signals import beat_init, worker_process_shutdown, worker_shutdown
from django.db import InterfaceError, OperationalError, close_old_connections

from django_outbox.conf import conf


class RetryLater(Exception):
    """Raised by a task to be run again for ``ids`` after ``countdown`` seconds."""

    def __init__(self, ids: Sequence[int], countdown: float) -> None:
        super().__init__(f"{len(ids)} deliveries due in {countdown:.1f}s")
        self.ids = list(ids)
        self.countdown = countdown


def outage_pause(retries: int) -> float:
    """Seconds to wait before retrying a task the database could not serve."""
    return min(60.0, 2.0**retries) * (0.5 + random.random() / 2)


class OutboxTask(Task):  # type: ignore[type-arg]
    """A task whose automatic retries take their delay and ids from :class:`RetryLater`,
    and which drops its database connection when Django would after a request."""

    def after_return(self, *args: Any, **kwargs: Any) -> None:
        """Close the connection if it is broken or older than ``CONN_MAX_AGE``.

        Celery's Django fix-up closes it after every task unless
        ``CELERY_DB_REUSE_MAX`` is set; with it set, this keeps Django's rules.
        """
        close_old_connections()

    def retry(  # type: ignore[override]
        self,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        exc: Exception | None = None,
        **options: Any,
    ) -> Any:
        if isinstance(exc, RetryLater):
            args = (exc.ids,)
            options["countdown"] = exc.countdown
            options["max_retries"] = None
        return super().retry(args=args, kwargs=kwargs, exc=exc, **options)


@shared_task(
    bind=True,
    base=OutboxTask,
    name="django_outbox.deliver",
    acks_late=True,
    ignore_result=True,
    autoretry_for=(RetryLater,),
    max_retries=None,
)
def deliver(self: OutboxTask, ids: list[int]) -> None:
    """Claim the deliveries ``ids`` that are due and send them."""
    from django_outbox.worker import run_deliveries

    try:
        later = run_deliveries(ids)
    except (OperationalError, InterfaceError) as error:
        raise RetryLater(ids, outage_pause(self.request.retries)) from error
    if later is not None:
        raise RetryLater(*later)


@shared_task(
    bind=True,
    base=OutboxTask,
    name="django_outbox.expand",
    acks_late=True,
    ignore_result=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=2,
    retry_backoff_max=60,
    max_retries=None,
)
def expand(self: OutboxTask, message_id: int) -> int:
    """Write and dispatch the deliveries of a large fan-out."""
    from django_outbox.fanout import expand as expand_message

    return expand_message(message_id)


@shared_task(base=OutboxTask, name="django_outbox.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    """Run one sweep: dispatch due and lost work, reclaim leases, prune."""
    from django_outbox.sweeper import sweep as run_sweep

    return run_sweep()


@beat_init.connect
def _schedule_sweep(sender: Any, **kwargs: Any) -> None:
    entries = sender.scheduler.schedule
    if "django_outbox.sweep" not in entries:
        sender.scheduler.update_from_dict(
            {
                "django_outbox.sweep": {
                    "task": "django_outbox.sweep",
                    "schedule": conf.SWEEP_INTERVAL,
                    "options": {"queue": "outbox", "expires": conf.SWEEP_INTERVAL},
                }
            }
        )


@worker_process_shutdown.connect
@worker_shutdown.connect
def _stop_engine(**kwargs: Any) -> None:
    from django_outbox.worker import stop_current

    stop_current(timeout=conf.STOP_TIMEOUT)

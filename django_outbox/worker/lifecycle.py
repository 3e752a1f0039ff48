"""Starting a worker process's parts, and ending a process that cannot go on.

A pool process starts its heart, its engine and recorder and its supervisor as it
starts (:func:`start_worker_process`, from ``worker_process_init``), and stops them at
a warm shutdown (:func:`stop_worker_process`).  When the supervisor finds a part dead
or stuck, :func:`end_unfit_process` runs: the process claims nothing more, stops
beating, gives back what it holds (what never started and what stuck steps held at
once; what is running gets ``OUTBOX_STOP_TIMEOUT`` to finish; if the recorder is the
part that failed, what it held is saved on the handler's own thread instead, so that
nothing already answered is sent again), deletes its heartbeat row and exits with status
:data:`EXIT_UNFIT`.  Celery's pool starts a fresh process in its place, and the message
of the task it was running goes back to the queue (``reject_on_worker_lost``).  If
handing back itself hangs (a database that does not answer), the process exits all the
same after ``OUTBOX_STOP_TIMEOUT + OUTBOX_STALL_TIMEOUT`` seconds, and the leader takes
back its claims once its heartbeat is stale.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

from django_outbox.conf import conf
from django_outbox.extensions.registry import active
from django_outbox.values.claimed import ClaimedRow
from django_outbox.worker.heartbeat import current_heart, start_heart, stop_heart
from django_outbox.worker.process import (
    current_process,
    give_back,
    stop_this_process,
    this_process,
)
from django_outbox.worker.supervisor import Part, this_supervisor

logger = logging.getLogger("django_outbox.supervisor")

#: The exit status of a process that ended because it could not go on (EX_SOFTWARE).
EXIT_UNFIT = 70

_started: int | None = None
_lock = threading.Lock()


def start_worker_process() -> None:
    """Start this process's heart, engine, recorder and supervisor (once per process)."""
    global _started
    with _lock:
        if _started == os.getpid():
            return
        supervisor = this_supervisor()
        supervisor.set_fatal_handler(end_unfit_process)
        process = this_process()
        start_heart(backlog=process.recorder.backlog)
        supervisor.start()
        _started = os.getpid()


def stop_worker_process(timeout: float) -> None:
    """A warm shutdown: stop watching, stop the engine (``timeout`` for what runs), the
    extensions' threads, then the heart."""
    this_supervisor().stop()
    stop_this_process(timeout)
    for extension in active():
        extension.worker_stopping()
    stop_heart()


def sweep_part() -> Part:
    """The supervised part a sweep runs its steps in: stuck for longer than a sweep
    interval (or the stall timeout, if longer), the process is unfit."""
    limit = max(conf.STALL_TIMEOUT, conf.SWEEP_INTERVAL)
    return this_supervisor().add(Part("sweep", limit))


def end_unfit_process(reason: str, held: list[ClaimedRow]) -> None:
    """The supervisor's fatal handler: give back, stop beating, exit (see the module)."""
    limit = conf.STOP_TIMEOUT + conf.STALL_TIMEOUT
    deadline = threading.Timer(limit, exit_process, args=(f"{reason}; handing back took too long",))
    deadline.daemon = True
    deadline.start()
    try:
        heart = current_heart()
        if heart is not None:
            heart.stop_threads()
        process = current_process()
        unstarted = [job.row for job in process.engine.stop()] if process is not None else []
        give_back([*held, *unstarted])
        if process is not None:
            recorder = this_supervisor().health().get("recorder")
            works = recorder is None or (recorder.alive and not recorder.stuck)
            process.stop(conf.STOP_TIMEOUT, recorder_works=works)
        if heart is not None:
            heart.forget()
    except Exception:
        logger.exception("could not hand back everything this process held")
    finally:
        exit_process(reason)


def exit_process(reason: str) -> None:
    """End this process at once with :data:`EXIT_UNFIT`, its logs flushed."""
    logger.error(
        "ending this worker process (exit status %d): %s; its pool starts another",
        EXIT_UNFIT,
        reason,
    )
    source: logging.Logger | None = logger
    while source is not None:
        for handler in source.handlers:
            with contextlib.suppress(Exception):  # a broken handler must not keep it alive
                handler.flush()
        source = source.parent
    os._exit(EXIT_UNFIT)

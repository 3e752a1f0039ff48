"""The heartbeat of a worker process, and the recovery passes of the one that leads.

Every Celery pool process beats (``worker_process_init`` starts it, see
:mod:`django_outbox.tasks`): a thread writes the process's
:class:`~django_outbox.models.Heartbeat` row every ``OUTBOX_HEARTBEAT_INTERVAL``
seconds, by the database's clock, and the process's claims carry its name.
The first beat is written before the process can claim anything, and the row is
deleted when it stops cleanly.

**The leader** is the oldest process (lowest id) whose row was written within
:data:`LEADER_BEATS` intervals and says it may lead.  Each process learns it from the
rows it reads when it beats, so no lock or election is needed; it stays the leader as
long as it beats, and when it dies the next oldest takes over within those intervals,
sooner than the heartbeat timeout after which its claims are taken back.  Two
processes may both believe they lead for a moment while rows change; every
recovery step tolerates that.  The leader's passes
(:func:`~django_outbox.upkeep.recovery_pass.recover`) run on a second thread, so that a slow
pass (a broker that does not answer) never delays its beats: a late beat would
make a live process look dead.  A pass stuck for ``OUTBOX_STALL_TIMEOUT`` seconds
hands the leadership on: the process beats on, saying it may not lead, until the
pass returns (:mod:`~django_outbox.worker.supervisor`).  Each beat also writes what
the process reports of itself (its parts, its recorder's backlog), which ``outbox
status`` shows; an unfit process stops beating.

A process judges others dead only after it has itself beaten without a gap
for :data:`JUDGE_AFTER` intervals: after a database outage every row is
stale, and the processes that are alive must first have the chance to beat
again (each tries every interval).  Not a whole timeout: a process that
started a moment ago, after others were killed, would then leave their claims
waiting that much longer.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, close_old_connections, connections

from django_outbox.conf import conf
from django_outbox.store.claim_rows import owner_name
from django_outbox.store.heartbeats import beat, live_names, stop_beating
from django_outbox.upkeep.recovery_pass import recover
from django_outbox.worker.supervisor import Part, Supervisor, this_supervisor

logger = logging.getLogger("django_outbox.heartbeat")

#: Intervals of steady beating after which a process may judge others dead.
JUDGE_AFTER = 2
#: Intervals within which the leader must have beaten to keep leading: one missed
#: beat is forgiven, and a dead leader is replaced within two intervals, so that
#: several leaders killed one after another do not leave recovery waiting long.
LEADER_BEATS = 2
#: Seconds :meth:`Heart.stop` waits for each thread.
_JOIN_WAIT = 5.0


class Heart:
    """Beats for this process on one thread; runs recovery passes on another while
    it leads (once :meth:`start` ran).  Both are parts of ``supervisor`` (the process's
    own by default); ``backlog`` tells what its recorder has not saved yet."""

    def __init__(
        self, supervisor: Supervisor | None = None, backlog: Callable[[], int] | None = None
    ) -> None:
        self.name = owner_name()
        self.pid = os.getpid()
        self.interval = conf.HEARTBEAT_INTERVAL
        self.timeout = conf.HEARTBEAT_TIMEOUT
        self.supervisor = supervisor or this_supervisor()
        self.backlog = backlog or (lambda: 0)
        self.leader = False
        #: When the current run of beats without a gap began (monotonic), or None.
        self.steady_since: float | None = None
        self._last_beat = 0.0
        self._stopping = threading.Event()
        self._pass_due = threading.Event()
        self._threads = [
            threading.Thread(target=self._beat_loop, name="outbox-heartbeat", daemon=True),
            threading.Thread(target=self._recovery_loop, name="outbox-recovery", daemon=True),
        ]
        stall = conf.STALL_TIMEOUT
        self._beating = Part("heartbeat", stall, threads=lambda: self._threads[:1])
        #: Stuck, it only stops this process from leading: the next oldest runs the passes.
        self._recovering = Part(
            "recovery pass", stall, threads=lambda: self._threads[1:], may_lead_only=True
        )

    def start(self) -> Heart:
        """Write the first beat here and now, then start beating and leading on threads."""
        self.beat_once()
        # Closed again: Celery's Django fix-up, which may run after this at the start
        # of a pool process, closes inherited connections by their file descriptor.
        connections.close_all()
        for thread in self._threads:
            thread.start()
        self.supervisor.add(self._beating)
        self.supervisor.add(self._recovering)
        return self

    def beat_once(self) -> None:
        """Write this process's beat and learn whether it leads; a failure is logged.

        An unfit process beats no more, so that its claims are taken back; one whose
        recovery pass is stuck says it may not lead, so that another does."""
        if self.supervisor.broken:
            return
        may_lead = self.supervisor.may_lead()
        parts = {name: health.as_dict() for name, health in self.supervisor.health().items()}
        try:
            beat(
                self.name,
                leader=self.leader and may_lead,
                can_lead=may_lead,
                parts=parts,
                backlog=self.backlog(),
            )
            names = live_names(min(self.timeout, LEADER_BEATS * self.interval), may_lead=True)
        except Exception as error:
            # One line each interval while the database is away.
            logger.warning("could not write the heartbeat of %s: %r", self.name, error)
            if not isinstance(error, DatabaseError):
                logger.debug("the heartbeat failed", exc_info=True)
            connections.close_all()  # this thread's
            self.steady_since = None
            return
        now = time.monotonic()
        if self.steady_since is None or now - self._last_beat > self.timeout:
            self.steady_since = now
        self._last_beat = now
        self.leader = may_lead and bool(names) and names[0] == self.name
        if self.leader:
            self._pass_due.set()

    def may_judge(self) -> bool:
        """Whether this process has beaten without a gap for :data:`JUDGE_AFTER` intervals."""
        since = self.steady_since
        return since is not None and time.monotonic() - since >= JUDGE_AFTER * self.interval

    def _beat_loop(self) -> None:
        try:
            while not self._stopping.wait(self.interval):
                with self._beating.step("beating"):
                    close_old_connections()
                    self.beat_once()
        finally:
            connections.close_all()

    def _recovery_loop(self) -> None:
        try:
            while True:
                self._pass_due.wait()
                self._pass_due.clear()
                if self._stopping.is_set():
                    return
                try:
                    close_old_connections()
                    recover(judge_owners=self.may_judge(), part=self._recovering)
                except Exception:  # recover() isolates its steps: this is a fault of its own
                    logger.exception("a recovery pass failed")
        finally:
            connections.close_all()

    def stop_threads(self) -> None:
        """Stop beating and leading (waiting a little for each thread); keep the row."""
        self._stopping.set()
        self._pass_due.set()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(_JOIN_WAIT)

    def stop(self) -> None:
        """Stop both threads and delete this process's row (it stops cleanly)."""
        self.stop_threads()
        self.forget()

    def forget(self) -> None:
        """Delete this process's row: its claims are no longer anybody's."""
        for last_try in (False, True):
            try:
                stop_beating(self.name)
                return
            except DatabaseError:
                if last_try:
                    logger.warning("could not delete the heartbeat of %s", self.name)
                else:
                    connections.close_all()  # broken by a database restart: a new one


_heart: Heart | None = None
_heart_lock = threading.Lock()


def start_heart(backlog: Callable[[], int] | None = None) -> Heart:
    """This process's :class:`Heart`, started on first use (and again after a fork);
    ``backlog`` tells it what the process's recorder has not saved yet."""
    global _heart
    with _heart_lock:
        if _heart is None or _heart.pid != os.getpid():
            _heart = Heart(backlog=backlog).start()
        return _heart


def current_heart() -> Heart | None:
    """This process's :class:`Heart` if it has one, without starting one."""
    heart = _heart
    return heart if heart is not None and heart.pid == os.getpid() else None


def stop_heart() -> None:
    """Stop this process's heart, if it has one (a warm shutdown)."""
    global _heart
    with _heart_lock:
        heart, _heart = _heart, None
    if heart is not None and heart.pid == os.getpid():
        heart.stop()

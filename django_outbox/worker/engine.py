"""Concurrent sending inside one worker process.

A Celery task only claims rows and hands them to the process's
:class:`Engine`: threads that keep up to ``OUTBOX_CONCURRENCY`` deliveries
in flight, at most ``OUTBOX_PER_HOST`` to one host.  A delivery whose host is
at its cap waits in that host's line without holding a thread, and one that
has been under way for :data:`SLOW_AFTER` seconds stops counting against the
concurrency (another thread is started, up to ``OUTBOX_MAX_THREADS``), so
slow or silent servers take their own slots and no others.  Priority-lane
deliveries are started before any other that waits, and go to the front of
their host's line.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

logger = logging.getLogger("django_outbox.engine")

J = TypeVar("J")

#: Seconds after which a running job stops counting against the concurrency.
SLOW_AFTER = 2.0
#: Seconds between counts of slow jobs, and an idle extra thread's wait before it ends.
_WATCH_EVERY = 0.25
_EXTRA_IDLE = 10.0


@dataclass
class _HostLine(Generic[J]):
    in_flight: int
    waiting: deque[J]


class Engine(Generic[J]):
    """Runs ``work(job)`` for submitted jobs, ``concurrency`` at a time.

    ``host_of`` names a job's host and ``urgent`` says whether it jumps the
    line.  ``submit`` blocks while ``backlog`` jobs (four per thread unless
    given) are ready to start, or ``parked`` (sixteen per thread) wait in the
    lines of hosts at their cap, which keeps a worker from claiming more than
    it can send before the leases of what it claimed run out.  Jobs parked
    behind slow hosts have a larger allowance of their own, so that they do not
    keep a worker from claiming work for other hosts.  Jobs running for
    more than ``slow_after`` seconds do not count against ``concurrency``; the
    threads they hold are made up for, up to ``max_threads`` in all.
    """

    def __init__(
        self,
        work: Callable[[J], None],
        *,
        host_of: Callable[[J], str],
        urgent: Callable[[J], bool],
        concurrency: int,
        per_host: int,
        backlog: int | None = None,
        parked: int | None = None,
        max_threads: int | None = None,
        slow_after: float = SLOW_AFTER,
    ) -> None:
        self._work = work
        self._host_of = host_of
        self._urgent = urgent
        self._per_host = max(1, per_host)
        self._backlog = backlog if backlog is not None else 4 * max(1, concurrency)
        self._parked_cap = parked if parked is not None else 16 * max(1, concurrency)
        # One lock, and a condition per kind of waiter, so that a finished job
        # wakes one sending thread rather than all of them.
        self._lock = threading.Lock()
        self._job_ready = threading.Condition(self._lock)
        self._room_made = threading.Condition(self._lock)
        self._settled = threading.Condition(self._lock)
        self._runnable: tuple[deque[J], deque[J]] = (deque(), deque())
        self._hosts: dict[str, _HostLine[J]] = defaultdict(lambda: _HostLine(0, deque()))
        self._waiting = 0  # ready to start or parked in a host's line
        self._parked = 0
        self._running = 0
        self._active: dict[int, tuple[J, float]] = {}
        self._stopping = False
        self._concurrency = max(1, concurrency)
        self._max_threads = max(self._concurrency, max_threads or 4 * self._concurrency)
        self._slow_after = slow_after
        self._slow = 0  # running jobs older than slow_after, as last counted
        self._idle = 0  # threads waiting for a job
        self._threads: set[threading.Thread] = set()
        self._names = itertools.count()
        with self._lock:
            for _ in range(self._concurrency):
                self._spawn()
        threading.Thread(target=self._watch, name="outbox-send-watch", daemon=True).start()

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._loop, name=f"outbox-send-{next(self._names)}", daemon=True
        )
        self._threads.add(thread)
        thread.start()

    def usage(self) -> tuple[int, int]:
        """Threads running a job now, and threads started (for the metrics)."""
        with self._lock:
            return self._running, len(self._threads)

    def room(self) -> int:
        """How many more jobs may be submitted before ``submit`` would block."""
        with self._lock:
            ready = self._waiting - self._parked
            return max(0, min(self._backlog - ready, self._parked_cap - self._parked))

    def wait_for_room(self, timeout: float) -> bool:
        """Block until a job may be submitted without waiting, up to ``timeout``.

        True if there is room (or the engine is stopping: submitting then refuses at once).
        """
        with self._lock:
            return self._room_made.wait_for(lambda: self._stopping or not self._full(), timeout)

    def _full(self) -> bool:
        ready = self._waiting - self._parked
        return ready >= self._backlog or self._parked >= self._parked_cap

    def submit(self, jobs: list[J], *, block: bool = True) -> list[J]:
        """Queue ``jobs``; returns those refused because the engine is stopping."""
        refused: list[J] = []
        with self._lock:
            for job in jobs:
                while block and not self._stopping and self._full():
                    self._room_made.wait()
                if self._stopping:
                    refused.append(job)
                    continue
                if self._add(job):
                    self._job_ready.notify()
        return refused

    def _add(self, job: J) -> bool:
        """Put ``job`` in line; True if it may start at once."""
        line = self._hosts[self._host_of(job)]
        self._waiting += 1
        if line.in_flight < self._per_host:
            line.in_flight += 1
            self._runnable[0 if self._urgent(job) else 1].append(job)
            return True
        self._parked += 1
        if self._urgent(job):
            line.waiting.appendleft(job)
        else:
            line.waiting.append(job)
        return False

    def _may_start(self) -> bool:
        runnable = bool(self._runnable[0] or self._runnable[1])
        return runnable and self._running - self._slow < self._concurrency

    def _next(self) -> J | None:
        with self._lock:
            self._idle += 1
            try:
                while not self._may_start():
                    if self._stopping:
                        return None
                    extra = len(self._threads) > self._concurrency
                    # A base thread also looks again now and then, whatever it was told.
                    if not self._job_ready.wait(_EXTRA_IDLE if extra else 1.0) and extra:
                        # An extra thread with nothing to do; leaving the set under
                        # the lock keeps two of them from both leaving for the last.
                        self._threads.discard(threading.current_thread())
                        return None
            finally:
                self._idle -= 1
            job = (self._runnable[0] or self._runnable[1]).popleft()
            self._waiting -= 1
            self._running += 1
            self._active[id(job)] = (job, time.monotonic())
            self._room_made.notify_all()
            return job

    def _watch(self) -> None:
        """Count slow jobs now and then, and start threads to make up for them."""
        while True:
            time.sleep(_WATCH_EVERY)
            with self._lock:
                if self._stopping:
                    return
                since = time.monotonic() - self._slow_after
                slow = sum(1 for _, started in self._active.values() if started < since)
                changed, self._slow = slow != self._slow, slow
                free = self._concurrency - (self._running - slow)
                wanted = min(free, len(self._runnable[0]) + len(self._runnable[1])) - self._idle
                for _ in range(min(wanted, self._max_threads - len(self._threads))):
                    self._spawn()
                if changed:
                    self._job_ready.notify(max(1, free))

    def _done(self, job: J) -> None:
        with self._lock:
            self._running -= 1
            del self._active[id(job)]
            host = self._host_of(job)
            line = self._hosts[host]
            if line.waiting:
                following = line.waiting.popleft()
                self._parked -= 1
                self._runnable[0 if self._urgent(following) else 1].append(following)
            else:
                line.in_flight -= 1
                if line.in_flight == 0:
                    del self._hosts[host]
            # No thread is woken for the slot this frees, or for the host's next
            # job: the thread that finished is about to ask for a job itself.
            if self._running + self._waiting == 0:
                self._settled.notify_all()

    def _loop(self) -> None:
        try:
            while (job := self._next()) is not None:
                try:
                    self._work(job)
                except Exception:
                    logger.exception("a delivery thread failed on %r", job)
                finally:
                    self._done(job)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def stop(self) -> list[J]:
        """Start nothing more; return the jobs that never started, for the caller to give back."""
        with self._lock:
            self._stopping = True
            unstarted = [*self._runnable[0], *self._runnable[1]]
            for line in self._hosts.values():
                unstarted.extend(line.waiting)
                line.waiting.clear()
            self._runnable[0].clear()
            self._runnable[1].clear()
            self._waiting = self._parked = 0
            for condition in (self._job_ready, self._room_made, self._settled):
                condition.notify_all()
        return unstarted

    def join(self, timeout: float) -> list[J]:
        """Wait up to ``timeout`` for the running jobs; return those still running."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            return [job for job, _ in self._active.values()]

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing runs or waits, up to ``timeout``; True if idle."""
        with self._lock:
            return self._settled.wait_for(lambda: self._running + self._waiting == 0, timeout)

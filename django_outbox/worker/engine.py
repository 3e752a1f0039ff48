"""Concurrent sending inside one worker process, on one asyncio event loop.

A Celery task only claims rows and hands them to the process's :class:`Engine`:
an event loop in a thread of its own that keeps up to ``OUTBOX_CONCURRENCY``
deliveries in flight, at most ``OUTBOX_PER_HOST`` to one host (a job the caller
puts in no host's line, one whose extension ticket is urgent, is not held by that cap),
fewer while the host ramps up after its breaker closed or its pause ended.
A delivery whose host is at its cap waits in that host's line
(:mod:`~django_outbox.worker.host_lines`), and one under way for
:data:`SLOW_AFTER` seconds stops counting against the concurrency (up to
``max_in_flight`` in all), so slow or silent servers take their own slots and no
others.  Priority-lane deliveries are started before any other that waits, go to
the front of their host's line, and do not wait for a slot of the concurrency:
like slow ones, they only count against ``max_in_flight``.

Waiting for answers costs no thread: hundreds of requests wait on one loop, and
the CPU a delivery needs (signing, writing, parsing) is spent on that loop's one
thread, without the lock handoffs of a thread per request.

Urgent jobs run on a second loop, in a thread of their own.  On the busy loop,
every step of a delivery (each ``await``) waits for one turn of the loop, in which
every other delivery in flight takes its own step, and each blocking call it hands
to the loop's executor queues behind theirs: a one-inbox reply started behind 64
CPU-bound deliveries to new hosts took up to a second to reach its server.  On the
urgent loop its steps wait only for the interpreter lock, and it starts without
waiting for a bulk delivery to end (a turn of that loop can take 100 ms and more).
Both loops share the caps: one ``max_in_flight`` and one line per host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from django_outbox.worker.host_lines import HostLines

logger = logging.getLogger("django_outbox.engine")

J = TypeVar("J")
T = TypeVar("T")

#: Seconds after which a running job stops counting against the concurrency.
SLOW_AFTER = 2.0
#: Seconds between counts of slow jobs.
_WATCH_EVERY = 0.25
#: Jobs parked behind slow hosts may fill this many parking caps before claims stop.
_STUCK_PARKED = 4
#: Seconds a stopping engine waits for cancelled jobs to end.
_CANCEL_WAIT = 1.0


class Engine(Generic[J]):
    """Runs ``await work(job)`` for submitted jobs on its own event loop.

    ``host_of`` names a job's host (None: a job in no host's line, which no host cap
    holds back) and ``urgent`` says whether it jumps the line; ``host_cap`` (if given)
    says how many of a host's jobs may run now, at most ``per_host``, and is asked
    again every :data:`_WATCH_EVERY` seconds for hosts held below it.
    ``submit`` refuses nothing but when stopping; callers keep to :meth:`room`: at
    most ``backlog`` jobs (one per unit of concurrency unless given) ready to start
    and ``parked`` (four per unit) waiting in the lines of hosts at their cap, which
    keeps a worker from claiming more than it can send before the leases of what it
    claimed run out; jobs parked behind a host whose running jobs are all slow (a
    silent server) stop counting, up to four such caps, so that silent servers do not
    stop the claims for every other host until their requests time out.  Urgent
    jobs, and jobs running for more than ``slow_after`` seconds, do not count against
    ``concurrency``; at most ``max_in_flight`` run in all.  ``new_loop`` makes its two
    loops (asyncio's, or uvloop's).  All methods but the work itself may be called from
    any thread.
    """

    def __init__(
        self,
        work: Callable[[J], Awaitable[None]],
        *,
        host_of: Callable[[J], str | None],
        urgent: Callable[[J], bool],
        concurrency: int,
        per_host: int,
        host_cap: Callable[[str], int] | None = None,
        backlog: int | None = None,
        parked: int | None = None,
        max_in_flight: int | None = None,
        slow_after: float = SLOW_AFTER,
        on_turn: Callable[[int], None] | None = None,
        new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self._work = work
        self._host_of = host_of
        self._urgent = urgent
        self._concurrency = max(1, concurrency)
        self._backlog = backlog if backlog is not None else self._concurrency
        self._parked_cap = parked if parked is not None else 4 * self._concurrency
        self._max_in_flight = max(self._concurrency, max_in_flight or 4 * self._concurrency)
        self._slow_after = slow_after
        # One lock for the bookkeeping shared with submitting threads; conditions
        # for the threads that wait for room or for the engine to settle.
        self._lock = threading.Lock()
        self._room_made = threading.Condition(self._lock)
        self._settled = threading.Condition(self._lock)
        self._runnable: tuple[deque[J], deque[J]] = (deque(), deque())
        self._lines: HostLines[J] = HostLines(per_host, host_cap, urgent)
        self._waiting = 0  # ready to start or parked in a host's line
        self._active: dict[int, tuple[J, float, asyncio.Task[None]]] = {}
        self._slow = 0  # running for more than slow_after, urgent ones aside
        self._stuck = 0  # parked behind hosts whose running jobs are all slow
        self._urgent_running = 0
        self._stopping = False
        # Per loop, by urgency (index 0: the urgent loop): a pump is on its way.
        self._pump_scheduled = [False, False]
        self._on_turn = on_turn
        self._loops = (new_loop(), new_loop())
        #: The threads of the urgent loop and of the main loop, in that order.
        self.threads = tuple(
            threading.Thread(target=self._run_loop, args=(lane,), name=name, daemon=True)
            for lane, name in ((0, "outbox-engine-urgent"), (1, "outbox-engine"))
        )
        for thread in self.threads:
            thread.start()

    # -- the loops -------------------------------------------------------------------

    def _run_loop(self, lane: int) -> None:
        loop = self._loops[lane]
        asyncio.set_event_loop(loop)
        loop.call_soon(self._turn, lane)
        loop.run_forever()

    def _turn(self, lane: int) -> None:
        """Every :data:`_WATCH_EVERY` seconds on each loop: tell ``on_turn`` the loop
        turns, and (on the main loop) count slow jobs."""
        try:
            if self._on_turn is not None:
                self._on_turn(lane)
            if lane:
                self._watch()
        finally:
            if not self._stopping:
                self._loops[lane].call_later(_WATCH_EVERY, self._turn, lane)

    def call(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``coroutine`` on the engine's main loop (from another thread); its future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loops[1])

    def _wake(self, but: int | None = None) -> None:
        """Have each loop (but ``but``) with jobs ready start what may start (lock held)."""
        if self._stopping:
            return
        for lane in (0, 1):
            if lane != but and self._runnable[lane] and not self._pump_scheduled[lane]:
                self._pump_scheduled[lane] = True
                self._loops[lane].call_soon_threadsafe(self._pump, lane)

    def _pump(self, lane: int) -> None:
        """Start every job of ``lane`` (0: urgent) that may start now (on its loop)."""
        with self._lock:
            self._pump_scheduled[lane] = False
            started = []
            while self._may_start(lane):
                job = self._runnable[lane].popleft()
                self._waiting -= 1
                task = self._loops[lane].create_task(self._run(job, lane))
                self._active[id(job)] = (job, time.monotonic(), task)
                self._urgent_running += not lane
                started.append(job)
            if started:
                self._room_made.notify_all()
                if not lane:
                    # The main loop may have looked while these were ready, and started
                    # nothing then: it may start its own now.
                    self._wake(but=lane)

    def _may_start(self, lane: int) -> bool:
        """Whether a job of ``lane`` (0: urgent) may start; others wait while urgent ones do."""
        if self._stopping or not self._runnable[lane] or (lane and self._runnable[0]):
            return False
        running = len(self._active)
        if running >= self._max_in_flight:
            return False
        return not lane or running - self._slow - self._urgent_running < self._concurrency

    async def _run(self, job: J, lane: int) -> None:
        try:
            await self._work(job)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("a delivery failed on %r", job)
        finally:
            self._done(job, lane)

    def _done(self, job: J, lane: int) -> None:
        with self._lock:
            del self._active[id(job)]
            self._urgent_running -= not lane
            host = self._host_of(job)
            following = None if host is None else self._lines.leave(host)
            if following is not None:
                self._ready(following)
            if not self._active and not self._waiting:
                self._settled.notify_all()
            self._wake(but=lane)
        self._pump(lane)

    def _ready(self, job: J) -> None:
        """``job`` may start: in line for its loop (lock held)."""
        self._runnable[0 if self._urgent(job) else 1].append(job)

    def _watch(self) -> None:
        """Count slow jobs now and then; a job turning slow frees a slot for another."""
        with self._lock:
            if self._stopping:
                return
            since = time.monotonic() - self._slow_after
            slow = sum(
                1
                for job, started, _ in self._active.values()
                if started < since and not self._urgent(job)
            )
            grew, self._slow = slow > self._slow, slow
            widened = self._lines.widen()
            for job in widened:
                self._ready(job)
            if grew or widened:
                self._wake(but=1)
            stuck, self._stuck = self._stuck, self._parked_behind_slow(since)
            if self._stuck > stuck or widened:
                self._room_made.notify_all()
        if grew or widened:
            self._pump(1)

    def _parked_behind_slow(self, since: float) -> int:
        """Jobs parked behind hosts all of whose running jobs started before ``since``
        (lock held): a silent server's line, which must not fill the parking cap and
        stop the claims for every other host until its requests time out."""
        slow: set[str | None] = set()
        fresh: set[str | None] = set()
        for job, started, _ in self._active.values():
            (slow if started < since else fresh).add(self._host_of(job))
        return self._lines.waiting_behind(slow - fresh)

    # -- from any thread -------------------------------------------------------------

    def room(self) -> int:
        """How many more jobs may be submitted within the backlog and parking caps."""
        with self._lock:
            return self._room()

    def _room(self) -> int:
        ready = self._waiting - self._lines.parked
        parked = max(0, self._lines.parked - self._stuck)
        total = _STUCK_PARKED * self._parked_cap - self._lines.parked
        return max(0, min(self._backlog - ready, self._parked_cap - parked, total))

    def wait_for_room(self, timeout: float, at_least: int = 1) -> bool:
        """Block until ``at_least`` jobs may be submitted within the caps, up to ``timeout``.

        True if there is that much room (or the engine is stopping: submitting then
        refuses at once).
        """
        with self._lock:
            return self._room_made.wait_for(
                lambda: self._stopping or self._room() >= at_least, timeout
            )

    def submit(self, jobs: list[J]) -> list[J]:
        """Queue ``jobs``; returns those refused because the engine is stopping."""
        if not jobs:
            return []
        with self._lock:
            if self._stopping:
                return list(jobs)
            for job in jobs:
                self._add(job)
            self._wake()
        return []

    def _add(self, job: J) -> None:
        """Put ``job`` in line: ready at once, or parked behind its host's cap."""
        host = self._host_of(job)
        self._waiting += 1
        if host is None or self._lines.join(host, job):
            self._ready(job)

    def stop(self) -> list[J]:
        """Start nothing more; return the jobs that never started, for the caller to give back."""
        with self._lock:
            self._stopping = True
            unstarted = [*self._runnable[0], *self._runnable[1], *self._lines.clear()]
            self._runnable[0].clear()
            self._runnable[1].clear()
            self._waiting = 0
            self._room_made.notify_all()
            self._settled.notify_all()
        return unstarted

    def join(self, timeout: float) -> list[J]:
        """Wait up to ``timeout`` for the running jobs, then cancel and return those left.

        A cancelled job's connection is closed; its request may have reached the
        server, so the caller gives it back to be sent again (at least once).
        """
        with self._lock:
            self._settled.wait_for(lambda: not self._active, timeout)
            left = [(job, task) for job, _, task in self._active.values()]
        ended = [
            asyncio.run_coroutine_threadsafe(
                self._end([task for _, task in left if task.get_loop() is loop]), loop
            )
            for loop in self._loops
        ]
        for end in ended:
            with contextlib.suppress(TimeoutError):
                end.result(_CANCEL_WAIT)
        return [job for job, _ in left]

    async def _end(self, tasks: list[asyncio.Task[None]]) -> None:
        """Cancel ``tasks``, give them a moment to close their connections, stop this loop."""
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_CANCEL_WAIT / 2)
        loop = asyncio.get_running_loop()
        loop.call_soon(loop.stop)

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing runs or waits, up to ``timeout``; True if idle."""
        with self._lock:
            return self._settled.wait_for(lambda: not self._active and not self._waiting, timeout)

    def usage(self) -> tuple[int, int]:
        """Jobs in flight now, and the most that may be (for the metrics and status)."""
        with self._lock:
            return len(self._active), self._max_in_flight

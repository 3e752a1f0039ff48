"""Supervision of a worker process's parts: a process is whole, or it is gone.

A worker process runs its parts on threads of their own: the engine's two event
loops, the recorder, the heartbeat, the recovery pass, and the Celery task thread
between a claim and the hand-over of its deliveries.  Each part guards its own work:
an exception becomes an outcome of the deliveries involved, and the part goes on.
What no guard can catch is a part whose thread ended, or that has been stuck in one
step (a batch save, a turn of the event loop, a claim being prepared) for
``OUTBOX_STALL_TIMEOUT`` seconds.  :class:`Supervisor` watches for that on a thread of
its own, twice a second:

- a part that may not lead (the recovery pass) and is stuck only stops this process
  from leading, so that the next oldest process runs the passes; it leads again once
  its pass returns;
- any other part dead or stuck makes the process unfit: it stops claiming at once,
  and its fatal handler (set by :mod:`django_outbox.worker.lifecycle`) hands back what
  it holds, stops beating and ends the process, which Celery's pool replaces.

Every part reports its state for the heartbeat row (:meth:`Supervisor.health`), which
``outbox status`` and the metrics read.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from django_outbox.values.claimed import ClaimedRow

logger = logging.getLogger("django_outbox.supervisor")

#: Seconds between two looks at the parts.
WATCH_EVERY = 0.5

FatalHandler = Callable[[str, list[ClaimedRow]], None]
"""Called once when the process cannot go on: the reason, and the claimed rows that
stuck steps hold (nobody else will give them an outcome)."""


@dataclass(frozen=True)
class PartHealth:
    """How one part stands: whether its threads run, and how long it has been stuck."""

    alive: bool
    #: Seconds the oldest unfinished step has run, or since the loop last turned.
    busy_for: float
    stuck: bool
    #: What the oldest unfinished step is doing, or ``""``.
    doing: str = ""

    def as_dict(self) -> dict[str, object]:
        """JSON-ready, as the heartbeat row stores it."""
        return {
            "alive": self.alive,
            "busy_for": round(self.busy_for, 1),
            "stuck": self.stuck,
            "doing": self.doing,
        }


class Part:
    """One supervised part: its threads, and the steps under way in them.

    A part that works in steps (the recorder saving a batch, a task preparing a claim)
    wraps each in :meth:`step`; a loop that should turn all the time calls :meth:`tick`
    each turn, which counts as a step that began at the last tick.  A part is stuck
    when a step has run for longer than ``stall_after`` seconds.
    """

    def __init__(
        self,
        name: str,
        stall_after: float,
        *,
        threads: Callable[[], Sequence[threading.Thread]] = tuple,
        may_lead_only: bool = False,
    ) -> None:
        self.name = name
        self.stall_after = stall_after
        #: When stuck, only leading is given up (the recovery pass); else the process.
        self.may_lead_only = may_lead_only
        self._threads = threads
        self._lock = threading.Lock()
        self._steps: dict[int, tuple[float, str, tuple[ClaimedRow, ...]]] = {}
        self._numbers = itertools.count()
        self._tick: float | None = None

    @contextlib.contextmanager
    def step(self, doing: str, rows: Sequence[ClaimedRow] = ()) -> Iterator[None]:
        """Mark a step under way while the block runs; ``rows`` are claimed rows that
        only this step can give an outcome to, handed back if it gets stuck."""
        number = next(self._numbers)
        with self._lock:
            self._steps[number] = (time.monotonic(), doing, tuple(rows))
        try:
            yield
        finally:
            with self._lock:
                del self._steps[number]

    def tick(self) -> None:
        """Note one more turn of a loop that should never stop turning."""
        self._tick = time.monotonic()

    def health(self, now: float | None = None) -> PartHealth:
        """The part's state now."""
        now = time.monotonic() if now is None else now
        threads = self._threads()
        alive = all(thread.is_alive() for thread in threads)
        with self._lock:
            started = [(since, doing) for since, doing, _ in self._steps.values()]
        if self._tick is not None:
            started.append((self._tick, "turning"))
        if not started:
            return PartHealth(alive, 0.0, False)
        since, doing = min(started)
        busy_for = max(0.0, now - since)
        return PartHealth(alive, busy_for, busy_for > self.stall_after, doing)

    def held_rows(self) -> list[ClaimedRow]:
        """The claimed rows of the steps under way."""
        with self._lock:
            return [row for _, _, rows in self._steps.values() for row in rows]


class Supervisor:
    """Watches a process's parts; turns a dead or stuck one into the fatal handler's call."""

    def __init__(self, on_fatal: FatalHandler | None = None) -> None:
        self._parts: dict[str, Part] = {}
        self._lock = threading.Lock()
        self._on_fatal = on_fatal
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        #: Why this process cannot go on, once it cannot; it claims nothing then.
        self.broken = ""

    def add(self, part: Part) -> Part:
        """Watch ``part`` (replacing a part of the same name)."""
        with self._lock:
            self._parts[part.name] = part
        return part

    def set_fatal_handler(self, on_fatal: FatalHandler) -> None:
        """What to call once the process cannot go on."""
        self._on_fatal = on_fatal

    def start(self) -> Supervisor:
        """Start watching on a thread of its own (once)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="outbox-supervisor", daemon=True
                )
                self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching: the process is stopping its parts on purpose (warm shutdown)."""
        self._stopping.set()

    def health(self) -> dict[str, PartHealth]:
        """Each part's state now, by name."""
        now = time.monotonic()
        with self._lock:
            parts = list(self._parts.values())
        return {part.name: part.health(now) for part in parts}

    def may_lead(self) -> bool:
        """Whether this process may lead: whole, and no part that leading needs is stuck."""
        if self.broken:
            return False
        return not any(
            not health.alive or health.stuck for health in self._leading_parts().values()
        )

    def _leading_parts(self) -> dict[str, PartHealth]:
        with self._lock:
            parts = [part for part in self._parts.values() if part.may_lead_only]
        return {part.name: part.health() for part in parts}

    def check(self) -> str:
        """Why the process cannot go on, or ``""``; a stuck part that may only stop the
        process from leading does not count."""
        with self._lock:
            parts = list(self._parts.values())
        for part in parts:
            health = part.health()
            if not health.alive and not part.may_lead_only:
                return f"the {part.name} thread has ended"
            if health.stuck and not part.may_lead_only:
                doing = f" ({health.doing})" if health.doing else ""
                return f"the {part.name} has been stuck for {health.busy_for:.0f} s{doing}"
        return ""

    def fail(self, reason: str) -> None:
        """Mark the process unfit (it claims nothing more) and call the fatal handler once,
        on a thread of its own (the caller may be the part it must wait for)."""
        with self._lock:
            if self.broken:
                return
            self.broken = reason
            parts = list(self._parts.values())
        held = [row for part in parts for row in part.held_rows()]
        logger.error(
            "this worker process cannot go on: %s; handing back %d claimed deliveries "
            "held by stuck steps (%s) and stopping",
            reason,
            len(held),
            ", ".join(str(row.id) for row in held[:20]) or "none",
        )
        handler = self._on_fatal
        if handler is not None:
            threading.Thread(
                target=handler, args=(reason, held), name="outbox-unfit", daemon=True
            ).start()

    def _watch(self) -> None:
        while not self.broken and not self._stopping.wait(WATCH_EVERY):
            try:
                reason = self.check()
            except Exception:  # a bug here must not end the watching
                logger.exception("could not check the parts of this worker process")
                continue
            if reason and not self._stopping.is_set():
                self.fail(reason)


_supervisor: tuple[int, Supervisor] | None = None
_supervisor_lock = threading.Lock()


def this_supervisor() -> Supervisor:
    """This process's supervisor, made on first use (and again after a fork)."""
    global _supervisor
    pid = os.getpid()
    with _supervisor_lock:
        if _supervisor is None or _supervisor[0] != pid:
            _supervisor = (pid, Supervisor())
        return _supervisor[1]

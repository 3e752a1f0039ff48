"""Each host's line in a worker's engine: its jobs under way and those waiting their turn.

At most ``per_host`` of a host's jobs run at once, fewer while ``host_cap`` says so (a
host ramping up after its breaker closed or its pause ended); the others wait in the
host's line, the urgent ones at its front.  A job that ends hands its slot to the next
one waiting, unless the host's cap has fallen below what runs; a cap that grows again
is noticed by :meth:`HostLines.widen`, which the engine calls now and then.  Nothing
here locks: the engine calls it under its own lock.
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

J = TypeVar("J")

logger = logging.getLogger("django_outbox.engine")


@dataclass
class _Line(Generic[J]):
    in_flight: int = 0
    waiting: deque[J] = field(default_factory=deque)


class HostLines(Generic[J]):
    """The lines of every host with jobs under way; ``urgent`` jobs wait at the front."""

    def __init__(
        self,
        per_host: int,
        host_cap: Callable[[str], int] | None,
        urgent: Callable[[J], bool],
    ) -> None:
        self._per_host = max(1, per_host)
        self._host_cap = host_cap
        self._urgent = urgent
        self._lines: dict[str, _Line[J]] = defaultdict(_Line)
        self._capped: set[str] = set()  # held below per_host with jobs waiting
        #: Jobs waiting in all lines.
        self.parked = 0

    def _cap(self, host: str) -> int:
        """``host``'s cap now; ``per_host`` if the reader fails (the lines must go on)."""
        if self._host_cap is None:
            return self._per_host
        try:
            return max(1, min(self._per_host, self._host_cap(host)))
        except Exception:
            logger.exception("reading the cap of %s failed; it has %d", host, self._per_host)
            return self._per_host

    def join(self, host: str, job: J) -> bool:
        """Put ``job`` in ``host``'s line: True if it takes a slot now, False if it waits."""
        line = self._lines[host]
        cap = self._cap(host)
        if line.in_flight < cap:
            line.in_flight += 1
            return True
        if cap < self._per_host:
            self._capped.add(host)
        self.parked += 1
        if self._urgent(job):
            line.waiting.appendleft(job)
        else:
            line.waiting.append(job)
        return False

    def leave(self, host: str) -> J | None:
        """A job of ``host`` ended: the waiting job that takes its slot, if one may."""
        line = self._lines[host]
        cap = self._cap(host) if line.waiting else self._per_host
        following = None
        if line.waiting and line.in_flight <= cap:
            following = self._unpark(line)
        line.in_flight -= 1
        if line.in_flight == 0:
            del self._lines[host]
        elif line.waiting and cap < self._per_host:
            self._capped.add(host)
        return following

    def widen(self) -> list[J]:
        """The waiting jobs that may start now that their hosts' caps have grown."""
        started = []
        for host in list(self._capped):
            line = self._lines.get(host)
            cap = self._cap(host) if line is not None else self._per_host
            while line is not None and line.waiting and line.in_flight < cap:
                started.append(self._unpark(line))
            if line is None or not line.waiting or cap >= self._per_host:
                self._capped.discard(host)
        return started

    def _unpark(self, line: _Line[J]) -> J:
        self.parked -= 1
        line.in_flight += 1
        return line.waiting.popleft()

    def waiting_behind(self, hosts: Iterable[str | None]) -> int:
        """Jobs waiting in the lines of ``hosts``."""
        return sum(len(self._lines[host].waiting) for host in hosts if host in self._lines)

    def clear(self) -> list[J]:
        """Empty every line of its waiting jobs, and return them."""
        waiting = [job for line in self._lines.values() for job in line.waiting]
        for line in self._lines.values():
            line.waiting.clear()
        self._capped.clear()
        self.parked = 0
        return waiting

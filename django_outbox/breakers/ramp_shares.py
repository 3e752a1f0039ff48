"""How far along its ramp each host is, as this process last learnt it from a rate store.

Every answer of a rate store says how much of the host's slow start is done (its
*share*: 0 as the ramp begins, below 0 while the host is held before it, 1 once
over).  Kept here with when it was learnt, a share is read later as grown since, by
one per slow start's span, without asking the store again: the worker's engine reads
it for each delivery it puts in a host's line, under its lock, so reading costs a
dictionary look-up and no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple


class _Learnt(NamedTuple):
    at: float
    share: float
    span: float


class RampShares:
    """Hosts' ramp shares learnt at ``clock`` times; at most ``max_hosts`` kept.

    Safe from many threads without a lock: it is a cache, and two threads that
    write it at once lose at most an entry, learnt again at the host's next turn.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_hosts: int = 10_000
    ) -> None:
        self._clock = clock
        self._max_hosts = max(1, max_hosts)
        self._hosts: dict[str, _Learnt] = {}

    def learnt(self, host: str, share: float, span: float) -> None:
        """The store said ``host``'s ramp of ``span`` seconds is ``share`` done now."""
        if share >= 1.0 or span <= 0:
            self._hosts.pop(host, None)
            return
        now = self._clock()
        if host not in self._hosts and len(self._hosts) >= self._max_hosts:
            kept = {h: seen for h, seen in list(self._hosts.items()) if _grown(seen, now) < 1.0}
            if len(kept) >= self._max_hosts:
                kept.pop(next(iter(kept)))
            self._hosts = kept
        self._hosts[host] = _Learnt(now, share, span)

    def share(self, host: str) -> float:
        """``host``'s share now, from 0.0 (held, or just begun) to 1.0 (none known)."""
        seen = self._hosts.get(host)
        if seen is None:
            return 1.0
        grown = _grown(seen, self._clock())
        if grown >= 1.0:
            self._hosts.pop(host, None)
            return 1.0
        return max(0.0, grown)


def _grown(seen: _Learnt, now: float) -> float:
    return seen.share + (now - seen.at) / seen.span

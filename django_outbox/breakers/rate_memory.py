"""Hosts' rates in this process's memory: the default, and the store without Redis.

Each worker process spaces its own requests: with several processes a host receives
up to their number times its rate.  Hosts whose turn and ramp are over are forgotten,
and at most ``max_hosts`` are kept (least recently asked go first).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from django_outbox.breakers.ramp_shares import RampShares
from django_outbox.breakers.rates import (
    Ramp,
    RatePolicy,
    RateRequest,
    Turn,
    ramp_over,
    ramp_share,
    started_ramp,
    take,
    throttled_ramp,
)


class MemoryRateStore:
    """Hosts' next free times and ramps in one process; ``clock`` gives seconds."""

    def __init__(
        self, max_hosts: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._max_hosts = max(1, max_hosts)
        self._clock = clock
        self._lock = threading.Lock()
        # host: (next free time, ramp), ordered by last use, oldest first.
        self._hosts: OrderedDict[str, tuple[float, Ramp | None]] = OrderedDict()
        self._shares = RampShares(clock, self._max_hosts)

    def take_many(self, requests: Sequence[RateRequest]) -> list[Turn]:
        """See :meth:`RateStore.take_many`."""
        with self._lock:
            now = self._clock()
            turns = []
            for host, policy, within in requests:
                tat, ramp = self._hosts.get(host, (now, None))
                turn, tat = take(policy, ramp, tat, now, within)
                self._keep(host, policy, tat, ramp, now)
                turns.append(turn)
            return turns

    def take_now(self, request: RateRequest) -> Turn:
        """See :meth:`RateStore.take_now`: memory needs no I/O."""
        return self.take_many([request])[0]

    def throttled(self, host: str, policy: RatePolicy, hold: float) -> None:
        """See :meth:`RateStore.throttled`."""
        with self._lock:
            now = self._clock()
            tat, ramp = self._hosts.get(host, (now, None))
            self._keep(host, policy, tat, throttled_ramp(policy, ramp, now, hold), now)

    def started(self, host: str, policy: RatePolicy, ago: float = 0.0) -> None:
        """See :meth:`RateStore.started`."""
        with self._lock:
            now = self._clock()
            tat, ramp = self._hosts.get(host, (now, None))
            self._keep(host, policy, tat, started_ramp(policy, ramp, now, ago), now)

    def ramp_share(self, host: str) -> float:
        """See :meth:`RateStore.ramp_share`."""
        return self._shares.share(host)

    def _keep(
        self, host: str, policy: RatePolicy, tat: float, ramp: Ramp | None, now: float
    ) -> None:
        """Store ``host``'s state, or forget it when it no longer holds anything back."""
        ramp = None if ramp_over(policy, ramp, now) else ramp
        self._shares.learnt(host, ramp_share(policy, ramp, now), policy.slow_start)
        if ramp is None and tat <= now:
            self._hosts.pop(host, None)
        else:
            self._hosts[host] = (tat, ramp)
            self._hosts.move_to_end(host)
        while len(self._hosts) > self._max_hosts:
            self._hosts.popitem(last=False)

"""Hosts' rates in Redis, shared by every worker process on every machine.

Each host is a hash under ``outbox:rate:<host>`` changed only by the Lua scripts of
:mod:`~django_outbox.breakers.rate_scripts`, so the turns that processes take never
overlap.  A host with no steady rate is asked about only to learn whether it ramps:
when Redis says it does not, this process sends there without asking for
:data:`FREE_FOR` seconds (a ramp another process starts meanwhile is seen that much
later).  An unreachable Redis never stops delivery: every turn is now, with the
breakers' rate-limited warning, and Redis is left alone for ``error_pause`` seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis

from django_outbox.breakers.ramp_shares import RampShares
from django_outbox.breakers.rate_scripts import NOTE_LUA, TAKE_LUA
from django_outbox.breakers.rates import NOW, RatePolicy, RateRequest, Turn
from django_outbox.breakers.redis_store import _pipelined, _warnings, cache_client

if TYPE_CHECKING:
    from redis.commands.core import Script

#: Seconds a host Redis found without limit nor ramp is sent to without asking.
FREE_FOR = 5.0


def _policy_args(policy: RatePolicy) -> tuple[str, str, str]:
    rate = "" if policy.rate is None else repr(policy.rate)
    return rate, repr(policy.floor), repr(policy.slow_start * 1000)


class RedisRateStore:
    """Rates in Redis; ``client_factory`` is called on each use, as the breakers' is."""

    def __init__(
        self,
        client_factory: Callable[[], redis.Redis],
        prefix: str = "outbox:rate:",
        *,
        error_pause: float = 15.0,
    ) -> None:
        self._client_factory = client_factory
        self.prefix = prefix
        self._error_pause = error_pause
        self._free: dict[str, float] = {}
        self._shares = RampShares()
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._scripts: tuple[Script, Script] | None = None

    def take_many(self, requests: Sequence[RateRequest]) -> list[Turn]:
        """See :meth:`RateStore.take_many`: in one pipelined round trip."""
        calls = [
            (host, (*_policy_args(policy), repr(within * 1000)))
            for host, policy, within in requests
        ]
        turns = []
        for request, reply in zip(requests, self._run(0, calls), strict=True):
            if reply is None:
                turns.append(NOW)
                continue
            reserved, wait, limited, share = (int(value) for value in reply)
            if not limited and request.policy.rate is None:
                self._set_free(request.host)
            self._shares.learnt(request.host, share / 1000, request.policy.slow_start)
            turns.append(Turn(bool(reserved), wait / 1000))
        return turns

    def take_now(self, request: RateRequest) -> Turn | None:
        """See :meth:`RateStore.take_now`: now, for a host found free a moment ago."""
        return NOW if self._free.get(request.host, 0.0) > time.monotonic() else None

    def throttled(self, host: str, policy: RatePolicy, hold: float) -> None:
        """See :meth:`RateStore.throttled`."""
        self._note(host, policy, "slow", hold)

    def started(self, host: str, policy: RatePolicy, ago: float = 0.0) -> None:
        """See :meth:`RateStore.started`."""
        self._note(host, policy, "start", ago)

    def ramp_share(self, host: str) -> float:
        """See :meth:`RateStore.ramp_share`: as the last script run for ``host`` said."""
        return self._shares.share(host)

    def _note(self, host: str, policy: RatePolicy, kind: str, seconds: float) -> None:
        """Run the note script (``kind`` 'slow' or 'start'); learn the ramp it leaves."""
        self._free.pop(host, None)
        (share,) = self._run(1, [(host, (*_policy_args(policy), kind, repr(seconds * 1000)))])
        if share is not None:
            self._shares.learnt(host, int(share) / 1000, policy.slow_start)

    def _set_free(self, host: str) -> None:
        now = time.monotonic()
        if len(self._free) > 10_000:
            self._free = {h: until for h, until in list(self._free.items()) if until > now}
        self._free[host] = now + FREE_FOR

    def _run(self, which: int, calls: Sequence[tuple[str, Sequence[str]]]) -> list[Any]:
        """Run script ``which`` (0 take, 1 note) for each ``(host, args)`` in one
        pipeline; ``None`` for each when Redis is unavailable."""
        if not calls:
            return []
        with self._lock:
            now = time.monotonic()
            if now < self._retry_at:
                return [None] * len(calls)
            self._retry_at = 0.0
        try:
            client = self._client_factory()
            if self._scripts is None:
                take, note = (client.register_script(s) for s in (TAKE_LUA, NOTE_LUA))
                self._scripts = (take, note)
            return _pipelined(client, self._scripts[which], self.prefix, calls)
        except redis.RedisError as error:
            with self._lock:
                self._retry_at = time.monotonic() + self._error_pause
            _warnings.warn("Host rates in Redis unavailable (%s); not spacing requests", error)
            return [None] * len(calls)


def redis_rate_store_for_cache(alias: str) -> RedisRateStore:
    """A rate store on django-redis cache ``alias`` (the breakers' cache)."""
    return RedisRateStore(cache_client(alias))

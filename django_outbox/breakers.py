"""Circuit breakers: holding back deliveries to destinations that keep failing.

After ``threshold`` failures in a row a breaker opens: deliveries are held, without a
request, for ``cool_off`` seconds.  Then one at a time is let through as a probe: success
closes it, failure reopens it, and a probe that never reports back (a crashed worker) is
given up after a cool-off.  :class:`RedisBreakerStore` shares breakers between all workers.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

import redis

from django_outbox.exceptions import OutboxConfigurationError, OutboxError

if TYPE_CHECKING:
    from redis.commands.core import Script

logger = logging.getLogger("django_outbox.breakers")


class BreakerStoreUnavailable(OutboxError):
    """The store cannot be read or changed: raised to the admin only, never to delivery."""


@dataclass(frozen=True)
class BreakerPolicy:
    """When a breaker opens and for how long, as the settings say."""

    #: Failures in a row that open the breaker.
    threshold: int = 10
    #: Seconds it holds deliveries before a probe, and how long a probe is waited for.
    cool_off: float = 60.0

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise OutboxConfigurationError(f"breaker threshold {self.threshold!r} is below 1")
        if not self.cool_off > 0:
            raise OutboxConfigurationError(f"breaker cool-off {self.cool_off!r} is not positive")

    @property
    def idle_after(self) -> float:
        """Seconds after its last change that a breaker may be forgotten (> a cool-off)."""
        return max(self.cool_off * 2, 600.0)


@dataclass(frozen=True)
class Admission:
    """A store's answer to "may this delivery be sent now?".

    ``pass``: send it.  ``probe``: send it as the half-open breaker's probe and
    give ``probe`` back to :meth:`BreakerStore.record`.  ``held``: do not send it;
    try again in about ``retry_in`` seconds, without spending an attempt.
    """

    kind: Literal["pass", "probe", "held"]
    probe: str | None = None
    retry_in: float = 0.0


PASS = Admission("pass")


@dataclass(frozen=True)
class BreakerState:
    """An open or half-open breaker, as the admin lists it."""

    key: str
    #: Failures in a row so far (counted afresh once it is half-open).
    failures: int
    #: When it stops holding deliveries: in the past once it is half-open.
    open_until: datetime
    #: Whether a probe is under way.
    probing: bool


class BreakerStore(Protocol):
    """Where breakers are kept; every method is safe to call from many threads."""

    def admit(self, key: str, policy: BreakerPolicy) -> Admission:
        """Whether a delivery to ``key`` may be sent now; ``probe`` takes the probe."""
        ...

    def record(self, key: str, policy: BreakerPolicy, *, failed: bool, probe: str | None) -> None:
        """Record how a delivery to ``key`` went; ``probe``: the token admit gave it.

        Only a probe's outcome closes or reopens an open breaker: other answers
        were sent before it opened and say nothing about the server now.
        """
        ...

    def states(self, limit: int = 500) -> list[BreakerState]:
        """Up to ``limit`` open and half-open breakers, latest ``open_until`` first."""
        ...

    def reset(self, key: str) -> None:
        """Close the breaker for ``key`` and forget its failures."""
        ...


def breaker_key(url_host: str, inbox: str, scope: Literal["host", "inbox"]) -> str:
    """The key of the breaker that holds deliveries to ``inbox`` on ``url_host``.

    The scope is part of the key, so changing the setting never mixes counts.
    """
    if scope == "host":
        return f"host:{url_host.lower()}"
    if scope == "inbox":
        return f"inbox:{inbox}"
    raise OutboxConfigurationError(f'breaker scope is "host" or "inbox", not {scope!r}')


@dataclass
class _Breaker:
    failures: int = 0
    open_until: float | None = None  # monotonic; None while closed
    probe_until: float | None = None  # None while no probe is under way
    changed: float = 0.0


class MemoryBreakerStore:
    """Breakers in this process's memory: the default, and the fallback without Redis.

    Other processes keep their own counts and let their own probes through.
    Breakers idle for :attr:`BreakerPolicy.idle_after` are forgotten and at most
    ``max_keys`` are kept (least recently changed go first): memory stays bounded.
    """

    def __init__(self, max_keys: int = 10_000) -> None:
        self._max_keys = max(1, max_keys)
        self._lock = threading.Lock()
        # Ordered by last change, oldest first, so forgetting starts at the front.
        self._breakers: OrderedDict[str, _Breaker] = OrderedDict()

    def admit(self, key: str, policy: BreakerPolicy) -> Admission:
        """See :meth:`BreakerStore.admit`."""
        with self._lock:
            state = self._breakers.get(key)
            if state is None or state.open_until is None:
                return PASS
            now = time.monotonic()
            if now < state.open_until:
                return Admission("held", retry_in=state.open_until - now)
            if state.probe_until is not None and now < state.probe_until:
                return Admission("held", retry_in=state.probe_until - now)
            state.probe_until, state.failures = now + policy.cool_off, 0
            self._touch(key, state, now)
            return Admission("probe", probe=uuid.uuid4().hex)

    def record(self, key: str, policy: BreakerPolicy, *, failed: bool, probe: str | None) -> None:
        """See :meth:`BreakerStore.record`."""
        with self._lock:
            now = time.monotonic()
            while self._breakers and (
                now - next(iter(self._breakers.values())).changed > policy.idle_after
            ):
                self._breakers.popitem(last=False)
            state = self._breakers.get(key)
            if state is not None and state.open_until is not None:
                if probe is None:
                    return
                if not failed:
                    del self._breakers[key]
                    return
                state.open_until, state.probe_until = now + policy.cool_off, None
                state.failures += 1
            elif not failed:
                self._breakers.pop(key, None)
                return
            else:
                if state is None:
                    state = self._breakers[key] = _Breaker()
                state.failures += 1
                if state.failures >= policy.threshold:
                    state.open_until = now + policy.cool_off
            self._touch(key, state, now)
            while len(self._breakers) > self._max_keys:
                self._breakers.popitem(last=False)

    def states(self, limit: int = 500) -> list[BreakerState]:
        """See :meth:`BreakerStore.states`."""
        with self._lock:
            now = time.monotonic()
            found = [
                _state(key, s.failures, s.open_until - now, (s.probe_until or now) - now)
                for key, s in self._breakers.items()
                if s.open_until is not None
            ]
        return _latest(found, limit)

    def reset(self, key: str) -> None:
        """See :meth:`BreakerStore.reset`."""
        with self._lock:
            self._breakers.pop(key, None)

    def _touch(self, key: str, state: _Breaker, now: float) -> None:
        state.changed = now
        self._breakers.move_to_end(key)


# A hash per breaker: failures, open_until (ms, absent while closed), probe, probe_until (ms).
# Time is Redis's TIME (workers' clocks never matter; effects replication lets it precede a
# write); ms stay below 10**14, which Lua prints exactly.  ARGV: token, cool-off, expiry (ms).
_ADMIT_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local s = redis.call('HMGET', KEYS[1], 'open_until', 'probe_until')
local open_until, probe_until = tonumber(s[1]), tonumber(s[2])
if not open_until then return {'pass', 0} end
if now < open_until then return {'held', open_until - now} end
if probe_until and now < probe_until then return {'held', probe_until - now} end
redis.call('HSET', KEYS[1], 'probe', ARGV[1], 'probe_until', now + ARGV[2], 'failures', 0)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'probe', 0}
"""
# ARGV: '1' failed or '0', probe token or '', threshold, cool-off (ms), expiry (ms).
_RECORD_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local s = redis.call('HMGET', KEYS[1], 'failures', 'open_until')
local failures = (tonumber(s[1]) or 0) + 1
if s[2] then
  if ARGV[2] == '' then return 0 end
  if ARGV[1] == '0' then redis.call('DEL', KEYS[1]) return 0 end
  redis.call('HSET', KEYS[1], 'open_until', now + ARGV[4], 'failures', failures)
  redis.call('HDEL', KEYS[1], 'probe', 'probe_until')
elseif ARGV[1] == '0' then
  if s[1] then redis.call('DEL', KEYS[1]) end
  return 0
elseif failures >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'failures', failures, 'open_until', now + ARGV[4])
else
  redis.call('HSET', KEYS[1], 'failures', failures)
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


class _WarningLimiter:
    """Logs at most one warning per ``every`` seconds, counting the ones it drops."""

    def __init__(self, every: float) -> None:
        self.every, self.next, self.dropped, self.lock = every, 0.0, 0, threading.Lock()

    def warn(self, message: str, *args: object) -> None:
        with self.lock:
            if (now := time.monotonic()) < self.next:
                self.dropped += 1
                return
            self.next, dropped, self.dropped = now + self.every, self.dropped, 0
        logger.warning(message + " (%d similar warnings dropped)", *args, dropped)


# One for the process: a down Redis is one problem, however many stores see it.
_warnings = _WarningLimiter(60.0)


def _state(key: str, failures: int, open_in: float, probe_in: float) -> BreakerState:
    """A breaker's state from seconds until it stops holding and until its probe ends."""
    return BreakerState(key, failures, datetime.now(UTC) + timedelta(seconds=open_in), probe_in > 0)


def _latest(found: list[BreakerState], limit: int) -> list[BreakerState]:
    return sorted(found, key=lambda state: state.open_until, reverse=True)[: max(0, limit)]


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class RedisBreakerStore:
    """Breakers in Redis, shared by every worker process on every machine.

    ``client_factory`` is called on each use (fork safety is the client's).  Each
    breaker is a hash under ``prefix`` with an expiry refreshed on every change.
    An unreachable Redis never stops delivery: :meth:`admit` answers ``pass`` and
    :meth:`record` does nothing, with a rate-limited warning; then Redis is skipped
    for ``error_pause`` seconds but by one caller, since a client with its default
    retries can take seconds to fail each call.
    """

    def __init__(
        self,
        client_factory: Callable[[], redis.Redis],
        prefix: str = "outbox:breaker:",
        *,
        error_pause: float = 15.0,
    ) -> None:
        self._client_factory = client_factory
        self.prefix = prefix
        self._error_pause = error_pause
        self._lock = threading.Lock()
        self._retry_at: float | None = None
        self._scripts: tuple[redis.Redis, Script, Script] | None = None

    def admit(self, key: str, policy: BreakerPolicy) -> Admission:
        """See :meth:`BreakerStore.admit`; ``pass`` when Redis cannot answer."""
        token = uuid.uuid4().hex
        reply = self._run(0, key, token, _ms(policy.cool_off), _ms(policy.idle_after))
        kind = reply[0] if reply else b"pass"
        if kind in (b"probe", "probe"):  # bytes, unless the client decodes responses
            return Admission("probe", probe=token)
        if kind in (b"held", "held"):
            return Admission("held", retry_in=int(reply[1]) / 1000)
        return PASS

    def record(self, key: str, policy: BreakerPolicy, *, failed: bool, probe: str | None) -> None:
        """See :meth:`BreakerStore.record`; does nothing when Redis cannot answer."""
        cool_off, idle = _ms(policy.cool_off), _ms(policy.idle_after)
        self._run(1, key, int(failed), probe or "", policy.threshold, cool_off, idle)

    def states(self, limit: int = 500) -> list[BreakerState]:
        """See :meth:`BreakerStore.states` (keys found by ``SCAN``); may raise Unavailable."""
        try:
            client = self._client_factory()
            seconds, microseconds = client.time()
            now = seconds + microseconds / 1e6
            names = client.scan_iter(
                match=re.sub(r"([*?[\]\\])", r"\\\1", self.prefix) + "*", count=500
            )
            found: list[BreakerState] = []
            while len(found) < limit and (batch := list(itertools.islice(names, 100))):
                pipe = client.pipeline(transaction=False)
                for name in batch:
                    pipe.hmget(name, ["failures", "open_until", "probe_until"])
                for name, (failures, until, probe) in zip(batch, pipe.execute(), strict=True):
                    if until is not None:
                        key = (name.decode() if isinstance(name, bytes) else name)[
                            len(self.prefix) :
                        ]
                        probe_in = 0.0 if probe is None else int(probe) / 1000 - now
                        open_in = int(until) / 1000 - now
                        found.append(_state(key, int(failures or 0), open_in, probe_in))
        except redis.RedisError as error:
            raise BreakerStoreUnavailable(f"cannot read breakers from Redis: {error}") from error
        return _latest(found, limit)

    def reset(self, key: str) -> None:
        """See :meth:`BreakerStore.reset`; raises :class:`BreakerStoreUnavailable`."""
        try:
            self._client_factory().delete(self.prefix + key)
        except redis.RedisError as error:
            raise BreakerStoreUnavailable(f"cannot reset breaker {key!r}: {error}") from error

    def _run(self, which: int, key: str, *args: str | int) -> Any:
        """Run script ``which`` (0 admit, 1 record); ``None`` if Redis is unavailable."""
        if self._retry_at is not None:
            with self._lock:
                now = time.monotonic()
                if self._retry_at is not None and now < self._retry_at:
                    return None
                # This caller tries Redis again; the others keep skipping it meanwhile.
                self._retry_at = now + self._error_pause
        try:
            client = self._client_factory()
            if self._scripts is None or self._scripts[0] is not client:
                admit, record = (client.register_script(s) for s in (_ADMIT_LUA, _RECORD_LUA))
                self._scripts = (client, admit, record)
            script = self._scripts[2] if which else self._scripts[1]
            reply = script(keys=[self.prefix + key], args=args, client=client)
        except redis.RedisError as error:
            with self._lock:
                self._retry_at = time.monotonic() + self._error_pause
            _warnings.warn(
                "Circuit breakers in Redis unavailable (%s); letting deliveries through", error
            )
            return None
        self._retry_at = None
        return reply


def redis_store_for_cache(alias: str, prefix: str = "outbox:breaker:") -> RedisBreakerStore:
    """A store on django-redis cache ``alias``, whose connection is looked up on each use.

    So it is safe to call at import time, and the client's own fork handling applies.
    """

    def connect() -> redis.Redis:
        from django_redis import get_redis_connection

        try:
            client: redis.Redis = get_redis_connection(alias)
        except NotImplementedError as error:
            raise OutboxConfigurationError(f"cache {alias!r} is not django-redis") from error
        return client

    return RedisBreakerStore(connect, prefix=prefix)

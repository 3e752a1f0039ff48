"""Circuit breakers in Redis, shared by every worker process on every machine.

The state machine is :mod:`django_outbox.breakers.policy`'s; here each breaker is a Redis hash
changed only by two Lua scripts, so counting, taking the probe and counting the
deliveries that await an answer are atomic between processes.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from django_outbox.breakers.policy import (
    BUSY_WAIT,
    PASS,
    Admission,
    BreakerPolicy,
    BreakerState,
    BreakerStoreUnavailable,
    breaker_state,
    held,
    latest,
)
from django_outbox.exceptions import OutboxConfigurationError

if TYPE_CHECKING:
    from redis.commands.core import Script

logger = logging.getLogger("django_outbox.breakers")

# A hash per breaker: failures, open_until (ms, absent while closed), probe (its token),
# probe_until (ms), and "a:<token>" = until when (ms) each admitted delivery counts as
# awaiting its answer.  Time is Redis's TIME (workers' clocks never matter; effects
# replication lets it precede a write); ms stay below 10**14, which Lua prints exactly.
# ARGV: token, cool-off, expiry, threshold, answer-within (ms), busy wait (ms).
_ADMIT_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local all = redis.call('HGETALL', KEYS[1])
local h, awaiting, first = {}, 0, nil
for i = 1, #all, 2 do
  local name, value = all[i], all[i + 1]
  if string.sub(name, 1, 2) == 'a:' then
    local until_ms = tonumber(value)
    if until_ms <= now then
      redis.call('HDEL', KEYS[1], name)
    else
      awaiting = awaiting + 1
      if not first or until_ms < first then first = until_ms end
    end
  else
    h[name] = value
  end
end
local open_until, probe_until = tonumber(h.open_until), tonumber(h.probe_until)
if open_until then
  if now < open_until then return {'held', open_until - now, 'open'} end
  if h.probe and probe_until and now < probe_until then
    return {'held', probe_until - now, 'open'}
  end
  redis.call('HSET', KEYS[1], 'probe', ARGV[1], 'probe_until', now + ARGV[2], 'failures', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'probe', 0, ''}
end
local failures = tonumber(h.failures) or 0
if awaiting > 0 and failures + awaiting >= tonumber(ARGV[4]) then
  local wait = tonumber(ARGV[6])
  if failures > 0 then wait = math.max(wait, first - now) end
  return {'held', wait, 'busy'}
end
redis.call('HSET', KEYS[1], 'a:' .. ARGV[1], now + ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'pass', 0, ''}
"""
# ARGV: '1' failed or '0', token or '', threshold, cool-off (ms), expiry (ms).
# Returns 2 when the breaker is closed after a success, 1 for a failure, 0 if ignored.
_RECORD_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if ARGV[2] ~= '' then redis.call('HDEL', KEYS[1], 'a:' .. ARGV[2]) end
local s = redis.call('HMGET', KEYS[1], 'failures', 'open_until', 'probe')
local failures = (tonumber(s[1]) or 0) + 1
if s[2] then
  if ARGV[2] == '' or s[3] ~= ARGV[2] then return 0 end
  if ARGV[1] == '0' then redis.call('DEL', KEYS[1]) return 2 end
  redis.call('HSET', KEYS[1], 'open_until', now + ARGV[4], 'failures', failures)
  redis.call('HDEL', KEYS[1], 'probe', 'probe_until')
elseif ARGV[1] == '0' then
  if s[1] then redis.call('HDEL', KEYS[1], 'failures') end
  return 2
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


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _text(value: bytes | str) -> str:
    """A reply element as text, whether or not the client decodes responses."""
    return value.decode() if isinstance(value, bytes) else value


class RedisBreakerStore:
    """Breakers in Redis, shared by every worker process on every machine.

    ``client_factory`` is called on each use (fork safety is the client's).  Each
    breaker is a hash under ``prefix`` with an expiry refreshed on every change.

    A destination that has just answered a delivery this store admitted well is
    trusted for ``trust_for`` seconds: this process sends to it without asking
    Redis and reports only failures, which end the trust at once.  That saves two
    round trips per delivery to healthy servers; the price is that a success
    while trusted does not reset failures other processes counted meanwhile, and
    a server that dies while trusted may get, from each process, the deliveries
    already under way to it on top of ``threshold``.

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
        trust_for: float = 30.0,
    ) -> None:
        self._client_factory = client_factory
        self.prefix = prefix
        self._error_pause = error_pause
        self._trust_for = trust_for
        self._trusted: dict[str, float] = {}
        self._lock = threading.Lock()
        self._retry_at: float | None = None
        # Made once, with the first client; each call names the client to run on.
        self._scripts: tuple[Script, Script] | None = None
        # Tokens unique between processes and machines, cheaper than a uuid each.
        self._token_prefix = uuid.uuid4().hex[:16]
        self._tokens = itertools.count()

    def admit(self, key: str, policy: BreakerPolicy) -> Admission:
        """See :meth:`BreakerStore.admit`; ``pass`` when Redis cannot answer."""
        if self._trusted.get(key, 0.0) > time.monotonic():
            return PASS
        token = f"{self._token_prefix}{next(self._tokens):x}"
        reply = self._run(
            0,
            key,
            token,
            _ms(policy.cool_off),
            _ms(policy.idle_after),
            policy.threshold,
            _ms(policy.answer_within),
            _ms(BUSY_WAIT),
        )
        if not reply:
            return PASS
        kind, wait, why = _text(reply[0]), int(reply[1]) / 1000, _text(reply[2])
        if kind == "held":
            return held(wait, "busy" if why == "busy" else "open")
        return Admission("probe" if kind == "probe" else "pass", token=token)

    def record(
        self, key: str, policy: BreakerPolicy, *, failed: bool, admission: Admission | None
    ) -> None:
        """See :meth:`BreakerStore.record`; does nothing when Redis cannot answer."""
        token = admission.token if admission is not None else None
        if failed:
            self._trusted.pop(key, None)
        elif token is None:
            return  # a trusted destination's success changes nothing worth a round trip
        cool_off, idle = _ms(policy.cool_off), _ms(policy.idle_after)
        reply = self._run(1, key, int(failed), token or "", policy.threshold, cool_off, idle)
        if reply == 2:
            self._trust(key)

    def admit_now(self, key: str, policy: BreakerPolicy) -> Admission | None:
        """See :meth:`BreakerStore.admit_now`: ``pass`` for a trusted destination."""
        return PASS if self._trusted.get(key, 0.0) > time.monotonic() else None

    def record_now(
        self, key: str, policy: BreakerPolicy, *, failed: bool, admission: Admission | None
    ) -> bool:
        """See :meth:`BreakerStore.record_now`: a trusted destination's success is news
        to nobody."""
        return not failed and (admission is None or admission.token is None)

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
                        key = _text(name)[len(self.prefix) :]
                        probe_in = 0.0 if probe is None else int(probe) / 1000 - now
                        open_in = int(until) / 1000 - now
                        found.append(breaker_state(key, int(failures or 0), open_in, probe_in))
        except redis.RedisError as error:
            raise BreakerStoreUnavailable(f"cannot read breakers from Redis: {error}") from error
        return latest(found, limit)

    def reset(self, key: str) -> None:
        """See :meth:`BreakerStore.reset`; raises :class:`BreakerStoreUnavailable`."""
        try:
            self._client_factory().delete(self.prefix + key)
        except redis.RedisError as error:
            raise BreakerStoreUnavailable(f"cannot reset breaker {key!r}: {error}") from error

    def _trust(self, key: str) -> None:
        now = time.monotonic()
        if len(self._trusted) > 10_000:
            # Keep memory bounded: forget what has lapsed, or everything.
            lapsed = [k for k, until in list(self._trusted.items()) if until <= now]
            for name in lapsed or list(self._trusted):
                self._trusted.pop(name, None)
        self._trusted[key] = now + self._trust_for

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
            if self._scripts is None:
                admit, record = (client.register_script(s) for s in (_ADMIT_LUA, _RECORD_LUA))
                self._scripts = (admit, record)
            script = self._scripts[which]
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

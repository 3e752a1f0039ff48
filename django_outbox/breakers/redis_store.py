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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import redis

from django_outbox.breakers.policy import (
    BUSY_WAIT,
    PASS,
    Admission,
    BreakerPolicy,
    BreakerState,
    BreakerStoreUnavailable,
    Report,
    breaker_state,
    held,
    latest,
)
from django_outbox.breakers.redis_scripts import ADMIT_LUA, RECORD_LUA
from django_outbox.exceptions import OutboxConfigurationError

if TYPE_CHECKING:
    from redis.commands.core import Script

logger = logging.getLogger("django_outbox.breakers")


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
        return self.admit_many([(key, policy)])[0]

    def admit_many(self, requests: Sequence[tuple[str, BreakerPolicy]]) -> list[Admission]:
        """See :meth:`BreakerStore.admit_many`: those not trusted in one round trip."""
        now = time.monotonic()
        answers: dict[int, Admission] = {}
        asked: list[tuple[int, str, str, BreakerPolicy]] = []
        for i, (key, policy) in enumerate(requests):
            if self._trusted.get(key, 0.0) > now:
                answers[i] = PASS
            else:
                asked.append((i, key, f"{self._token_prefix}{next(self._tokens):x}", policy))
        calls: list[tuple[str, tuple[str | int, ...]]] = [
            (key, (token, *_admit_args(policy))) for _, key, token, policy in asked
        ]
        for (i, _, token, _), reply in zip(asked, self._run(0, calls), strict=True):
            answers[i] = _admission(reply, token)
        return [answers[i] for i in range(len(requests))]

    def record(
        self,
        key: str,
        policy: BreakerPolicy,
        *,
        failed: bool,
        admission: Admission | None,
        throttle: float = 0.0,
        answered: bool = True,
    ) -> bool:
        """See :meth:`BreakerStore.record`; False when Redis cannot answer."""
        return self.record_many([Report(key, policy, failed, admission, throttle, answered)])[0]

    def record_many(self, reports: Sequence[Report]) -> list[bool]:
        """See :meth:`BreakerStore.record_many`: in one round trip."""
        answers = [False] * len(reports)
        asked: list[int] = []
        calls: list[tuple[str, tuple[str | int, ...]]] = []
        for i, (key, policy, failed, admission, throttle, answered) in enumerate(reports):
            token = admission.token if admission is not None else None
            if failed or throttle > 0:
                self._trusted.pop(key, None)
            elif token is None:
                continue  # a trusted destination's success changes nothing worth a round trip
            cool_off, idle = _ms(policy.cool_off), _ms(policy.idle_after)
            verdict = ("1" if failed else "0") if answered else "-"
            args = (verdict, token or "", policy.threshold, cool_off, idle)
            calls.append((key, (*args, _ms(throttle) if throttle > 0 else 0)))
            asked.append(i)
        for i, (key, _), reply in zip(asked, calls, self._run(1, calls), strict=True):
            if reply == 2:
                self._trust(key)
            answers[i] = reply == 3
        return answers

    def admit_now(self, key: str, policy: BreakerPolicy) -> Admission | None:
        """See :meth:`BreakerStore.admit_now`: ``pass`` for a trusted destination."""
        return PASS if self._trusted.get(key, 0.0) > time.monotonic() else None

    def record_now(self, report: Report) -> bool | None:
        """See :meth:`BreakerStore.record_now`: a trusted destination's success is news
        to nobody (and nothing is held there)."""
        admission = report.admission
        quiet = admission is None or admission.token is None
        return False if quiet and not report.failed and report.throttle <= 0 else None

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

    def _run(self, which: int, calls: Sequence[tuple[str, Sequence[str | int]]]) -> list[Any]:
        """Run script ``which`` (0 admit, 1 record) for each ``(key, args)``, pipelined;
        a reply of ``None`` for each when Redis is unavailable."""
        if not calls:
            return []
        if self._retry_at is not None:
            with self._lock:
                now = time.monotonic()
                if self._retry_at is not None and now < self._retry_at:
                    return [None] * len(calls)
                # This caller tries Redis again; the others keep skipping it meanwhile.
                self._retry_at = now + self._error_pause
        try:
            client = self._client_factory()
            if self._scripts is None:
                admit, record = (client.register_script(s) for s in (ADMIT_LUA, RECORD_LUA))
                self._scripts = (admit, record)
            replies = _pipelined(client, self._scripts[which], self.prefix, calls)
        except redis.RedisError as error:
            with self._lock:
                self._retry_at = time.monotonic() + self._error_pause
            _warnings.warn(
                "Circuit breakers in Redis unavailable (%s); letting deliveries through", error
            )
            return [None] * len(calls)
        self._retry_at = None
        return replies


def _pipelined(
    client: redis.Redis,
    script: Script,
    prefix: str,
    calls: Sequence[tuple[str, Sequence[str | int]]],
) -> list[Any]:
    """``script``'s replies for each ``(key, args)``: one call alone, or one pipeline
    (loading the script first if Redis has forgotten it)."""
    if len(calls) == 1:
        key, args = calls[0]
        return [script(keys=[prefix + key], args=args, client=client)]
    for loaded in (True, False):
        pipe = client.pipeline(transaction=False)
        for key, args in calls:
            pipe.evalsha(script.sha, 1, prefix + key, *args)
        try:
            return list(pipe.execute())
        except redis.exceptions.NoScriptError:
            if not loaded:
                raise
            client.script_load(script.script)
    raise AssertionError("unreachable: the second pass returns or raises")


def _admit_args(policy: BreakerPolicy) -> tuple[int, ...]:
    """The admit script's arguments after the token."""
    return (
        _ms(policy.cool_off),
        _ms(policy.idle_after),
        policy.threshold,
        _ms(policy.answer_within),
        _ms(BUSY_WAIT),
    )


_WHY: dict[str, Literal["busy", "throttled"]] = {"busy": "busy", "throttled": "throttled"}


def _admission(reply: Any, token: str) -> Admission:
    """The admit script's ``reply`` to the delivery given ``token``: ``pass`` for none."""
    if not reply:
        return PASS
    kind, wait, why = _text(reply[0]), int(reply[1]) / 1000, _text(reply[2])
    if kind == "held":
        return held(wait, _WHY.get(why, "open"))
    return Admission("probe" if kind == "probe" else "pass", token=token)


def cache_client(alias: str) -> Callable[[], redis.Redis]:
    """A function returning the Redis client of django-redis cache ``alias``, looked up
    on each call: safe to build at import time, and the client's fork handling applies."""

    def connect() -> redis.Redis:
        from django_redis import get_redis_connection

        try:
            client: redis.Redis = get_redis_connection(alias)
        except NotImplementedError as error:
            raise OutboxConfigurationError(f"cache {alias!r} is not django-redis") from error
        return client

    return connect


def redis_store_for_cache(alias: str, prefix: str = "outbox:breaker:") -> RedisBreakerStore:
    """A store on django-redis cache ``alias`` (see :func:`cache_client`)."""
    return RedisBreakerStore(cache_client(alias), prefix=prefix)

"""Circuit breakers: holding back deliveries to destinations that keep failing.

After ``threshold`` failures in a row a breaker opens: deliveries are held, without a
request, for ``cool_off`` seconds.  Then one at a time is let through as a probe: success
closes it, failure reopens it, and a probe that never reports back (a crashed worker) is
given up after a cool-off.

While it is closed, a breaker also counts the deliveries it let through whose answer has
not come yet: failures plus those may never exceed ``threshold``, so a server that takes
connections and never answers gets at most ``threshold`` requests before its breaker
opens, however many workers send to it.  An admitted delivery stops counting when its
outcome is recorded, or after ``answer_within`` seconds (a worker that died).

:class:`MemoryBreakerStore` keeps breakers in one process;
:class:`~django_outbox.redis_breakers.RedisBreakerStore` shares them between all workers.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from django_outbox.exceptions import OutboxConfigurationError, OutboxError


class BreakerStoreUnavailable(OutboxError):
    """The store cannot be read or changed: raised to the admin only, never to delivery."""


@dataclass(frozen=True)
class BreakerPolicy:
    """When a breaker opens, for how long, and how long an admitted delivery counts."""

    #: Failures in a row that open the breaker.
    threshold: int = 10
    #: Seconds it holds deliveries before a probe, and how long a probe is waited for.
    cool_off: float = 60.0
    #: Seconds an admitted delivery counts as awaiting its answer, at most.
    answer_within: float = 70.0

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise OutboxConfigurationError(f"breaker threshold {self.threshold!r} is below 1")
        if not self.cool_off > 0:
            raise OutboxConfigurationError(f"breaker cool-off {self.cool_off!r} is not positive")
        if not self.answer_within > 0:
            raise OutboxConfigurationError(
                f"breaker answer_within {self.answer_within!r} is not positive"
            )

    @property
    def idle_after(self) -> float:
        """Seconds after its last change that a breaker may be forgotten (> a cool-off)."""
        return max(self.cool_off * 2, self.answer_within, 600.0)


#: Seconds a held delivery waits when the breaker is closed but ``threshold``
#: deliveries to the destination await their answer.
BUSY_WAIT = 1.0


@dataclass(frozen=True)
class Admission:
    """A store's answer to "may this delivery be sent now?".

    ``pass``: send it.  ``probe``: send it as the half-open breaker's probe.
    ``held``: do not send it; try again in about ``retry_in`` seconds, without
    spending an attempt; ``why`` says whether the breaker is ``open`` or
    ``busy`` (``threshold`` deliveries already await an answer).  Whatever is
    sent is reported to :meth:`BreakerStore.record` with this admission, whose
    ``token`` names it in the store (``None``: the store does not track it).
    """

    kind: Literal["pass", "probe", "held"]
    token: str | None = None
    retry_in: float = 0.0
    why: Literal["", "open", "busy"] = ""


#: The admission of a delivery the store does not track.
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

    def record(
        self, key: str, policy: BreakerPolicy, *, failed: bool, admission: Admission | None
    ) -> None:
        """Record how a delivery to ``key`` that ``admission`` let through went.

        Only the current probe's outcome closes or reopens an open breaker: other
        answers were sent before it opened and say nothing about the server now.
        ``admission`` is ``None`` for an outcome the store did not admit.
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


def held(retry_in: float, why: Literal["open", "busy"]) -> Admission:
    """A ``held`` admission, waiting ``retry_in`` seconds (at least a millisecond)."""
    return Admission("held", retry_in=max(0.001, retry_in), why=why)


@dataclass
class _Breaker:
    failures: int = 0
    open_until: float | None = None  # monotonic; None while closed
    probe: str | None = None  # the probe's token while one is under way
    probe_until: float = 0.0
    awaiting: dict[str, float] = field(default_factory=dict)  # token: counts until
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
        self._tokens = itertools.count(1)
        # Ordered by last change, oldest first, so forgetting starts at the front.
        self._breakers: OrderedDict[str, _Breaker] = OrderedDict()

    def admit(self, key: str, policy: BreakerPolicy) -> Admission:
        """See :meth:`BreakerStore.admit`."""
        with self._lock:
            now = time.monotonic()
            self._forget_idle(now, policy)
            state = self._breakers.get(key)
            if state is None:
                state = self._breakers[key] = _Breaker()
            token = str(next(self._tokens))
            if state.open_until is not None:
                if now < state.open_until:
                    return held(state.open_until - now, "open")
                if state.probe is not None and now < state.probe_until:
                    return held(state.probe_until - now, "open")
                state.probe, state.probe_until, state.failures = token, now + policy.cool_off, 0
                self._touch(key, state, now)
                return Admission("probe", token=token)
            state.awaiting = {t: until for t, until in state.awaiting.items() if until > now}
            if state.awaiting and state.failures + len(state.awaiting) >= policy.threshold:
                return held(_busy_wait(state.failures, min(state.awaiting.values()) - now), "busy")
            state.awaiting[token] = now + policy.answer_within
            self._touch(key, state, now)
            return Admission("pass", token=token)

    def record(
        self, key: str, policy: BreakerPolicy, *, failed: bool, admission: Admission | None
    ) -> None:
        """See :meth:`BreakerStore.record`."""
        token = admission.token if admission is not None else None
        with self._lock:
            now = time.monotonic()
            self._forget_idle(now, policy)
            state = self._breakers.get(key)
            if state is None:
                if not failed:
                    return
                state = self._breakers[key] = _Breaker()
            if token is not None:
                state.awaiting.pop(token, None)
            if state.open_until is not None:
                if token is None or token != state.probe:
                    return
                if not failed:
                    del self._breakers[key]
                    return
                state.open_until, state.probe = now + policy.cool_off, None
                state.failures += 1
            elif not failed:
                state.failures = 0
                if not state.awaiting:
                    del self._breakers[key]
                return
            else:
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
                breaker_state(
                    key,
                    s.failures,
                    s.open_until - now,
                    s.probe_until - now if s.probe is not None else 0.0,
                )
                for key, s in self._breakers.items()
                if s.open_until is not None
            ]
        return latest(found, limit)

    def reset(self, key: str) -> None:
        """See :meth:`BreakerStore.reset`."""
        with self._lock:
            self._breakers.pop(key, None)

    def _forget_idle(self, now: float, policy: BreakerPolicy) -> None:
        while self._breakers and (
            now - next(iter(self._breakers.values())).changed > policy.idle_after
        ):
            self._breakers.popitem(last=False)

    def _touch(self, key: str, state: _Breaker, now: float) -> None:
        state.changed = now
        self._breakers.move_to_end(key)


def _busy_wait(failures: int, until_first_lapses: float) -> float:
    """How long to hold a delivery while ``threshold`` deliveries await their answer.

    With failures counted, only a success or a lapsed wait frees a place, and a
    failing server seldom answers well: wait for the first wait to lapse.  With
    none, the server may just be busy: look again soon.
    """
    return max(BUSY_WAIT, until_first_lapses) if failures else BUSY_WAIT


def breaker_state(key: str, failures: int, open_in: float, probe_in: float) -> BreakerState:
    """A breaker's state from seconds until it stops holding and until its probe ends."""
    return BreakerState(key, failures, datetime.now(UTC) + timedelta(seconds=open_in), probe_in > 0)


def latest(found: list[BreakerState], limit: int) -> list[BreakerState]:
    """The ``limit`` states that stop holding last."""
    return sorted(found, key=lambda state: state.open_until, reverse=True)[: max(0, limit)]

"""Circuit breakers in this process's memory: the default, and the fallback without Redis."""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from django_outbox.breakers.policy import (
    BUSY_WAIT,
    Admission,
    BreakerPolicy,
    BreakerState,
    Report,
    breaker_state,
    held,
    latest,
)


@dataclass
class _Breaker:
    failures: int = 0
    open_until: float | None = None  # monotonic; None while closed
    probe: str | None = None  # the probe's token while one is under way
    probe_until: float = 0.0
    awaiting: dict[str, float] = field(default_factory=dict)  # token: counts until
    changed: float = 0.0
    held_until: float = 0.0  # when the last delivery it held comes back by itself
    throttled_until: float = 0.0


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
            if now < state.throttled_until:
                return self._hold(key, state, now, state.throttled_until - now, "throttled")
            if state.open_until is not None:
                if now < state.open_until:
                    return self._hold(key, state, now, state.open_until - now, "open")
                if state.probe is not None and now < state.probe_until:
                    return self._hold(key, state, now, state.probe_until - now, "open")
                state.probe, state.probe_until, state.failures = token, now + policy.cool_off, 0
                self._touch(key, state, now)
                return Admission("probe", token=token)
            state.awaiting = {t: until for t, until in state.awaiting.items() if until > now}
            if state.awaiting and state.failures + len(state.awaiting) >= policy.threshold:
                wait = _busy_wait(state.failures, min(state.awaiting.values()) - now)
                return self._hold(key, state, now, wait, "busy")
            state.awaiting[token] = now + policy.answer_within
            self._touch(key, state, now)
            return Admission("pass", token=token)

    def _hold(
        self,
        key: str,
        state: _Breaker,
        now: float,
        wait: float,
        why: Literal["open", "busy", "throttled"],
    ) -> Admission:
        """A ``held`` admission, noting until when this breaker has holds running."""
        admission = held(wait, why)
        state.held_until = max(state.held_until, now + admission.retry_in)
        self._touch(key, state, now)
        return admission

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
        """See :meth:`BreakerStore.record`."""
        token = admission.token if admission is not None else None
        with self._lock:
            now = time.monotonic()
            self._forget_idle(now, policy)
            state = self._breakers.get(key)
            if state is None:
                if not failed and throttle <= 0:
                    return False
                state = self._breakers[key] = _Breaker()
            if token is not None:
                state.awaiting.pop(token, None)
            if not answered:
                if token is not None and token == state.probe:
                    state.probe, state.probe_until = None, 0.0
                return False
            if state.open_until is not None and (token is None or token != state.probe):
                return False
            if failed:
                state.failures += 1
                if state.open_until is not None or state.failures >= policy.threshold:
                    state.open_until, state.probe = now + policy.cool_off, None
            else:
                # The probe or a delivery answered: it closes, or its count starts again.
                state.open_until, state.probe, state.failures = None, None, 0
                if throttle > 0:
                    state.throttled_until = now + throttle
                    state.held_until = max(state.held_until, state.throttled_until)
                elif now >= state.held_until and now >= state.throttled_until:
                    if not state.awaiting:
                        del self._breakers[key]
                    return False
                else:
                    self._touch(key, state, now)
                    return now < state.held_until and now >= state.throttled_until
            self._touch(key, state, now)
            while len(self._breakers) > self._max_keys:
                self._breakers.popitem(last=False)
            return False

    def admit_many(self, requests: Sequence[tuple[str, BreakerPolicy]]) -> list[Admission]:
        """See :meth:`BreakerStore.admit_many`."""
        return [self.admit(key, policy) for key, policy in requests]

    def record_many(self, reports: Sequence[Report]) -> list[bool]:
        """See :meth:`BreakerStore.record_many`."""
        return [
            self.record(
                report.key,
                report.policy,
                failed=report.failed,
                admission=report.admission,
                throttle=report.throttle,
                answered=report.answered,
            )
            for report in reports
        ]

    def admit_now(self, key: str, policy: BreakerPolicy) -> Admission:
        """See :meth:`BreakerStore.admit_now`: memory needs no I/O."""
        return self.admit(key, policy)

    def record_now(self, report: Report) -> bool | None:
        """See :meth:`BreakerStore.record_now`: memory needs no I/O."""
        return self.record_many([report])[0]

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

"""Requests per second per host: the policy, its arithmetic, and a rate store's protocol.

A host may have a steady rate (``OUTBOX_HOST_RATE``, or its own in
``OUTBOX_HOST_RATES``); ``None`` is no limit.  On top of it a host may be *ramping*:

- **slow-down**: a ``429`` (or a ``503`` with ``Retry-After``) holds the host for the
  time asked, then it resumes at half the rate it had (:func:`slowed`), at least
  ``floor``;
- **slow start**: after its breaker's probe succeeded, or its pause ended, the host
  resumes at ``floor``.

Either way the rate then grows by a constant factor per second (:func:`rate_at`) and
reaches the steady rate after ``slow_start`` seconds; a host without a steady rate
doubles :data:`UNLIMITED_DOUBLINGS` times over that span, and then has no limit again.
A ramp's start is ``(at, start)``: when it begins (the end of the hold) and its rate then.
How much of it is done (:func:`ramp_share`) also ramps the host's concurrency in each
worker process (:func:`django_outbox.worker.pacing.host_cap`).

Requests are spaced as GCRA does (a "theoretical arrival time" per host, pushed by one
interval at the current rate per request): :meth:`RateStore.take_many` answers each
delivery how long to wait for its turn.  A turn within ``within`` seconds is reserved,
and the delivery waits for it on the event loop; a later one is not, and the delivery
is given back without spending an attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from django_outbox.exceptions import OutboxConfigurationError

#: Doublings over the slow start of a host without a steady rate (from a floor of 1/s
#: to 256/s), after which its limit is lifted.
UNLIMITED_DOUBLINGS = 8.0


@dataclass(frozen=True)
class RatePolicy:
    """A host's steady rate, the lowest it is slowed to, and how long it takes to ramp."""

    #: Requests per second once not ramping; ``None``: no limit.
    rate: float | None = None
    #: Requests per second a slow start begins at, and a slow-down's lowest.
    floor: float = 1.0
    #: Seconds a ramp takes to reach ``rate``; 0: none (a slow-down only holds).
    slow_start: float = 60.0

    def __post_init__(self) -> None:
        if self.rate is not None and not self.rate > 0:
            raise OutboxConfigurationError(f"host rate {self.rate!r} is not positive")
        if not self.floor > 0:
            raise OutboxConfigurationError(f"rate floor {self.floor!r} is not positive")
        if not self.slow_start >= 0:
            raise OutboxConfigurationError(f"slow start {self.slow_start!r} is negative")


class Ramp(NamedTuple):
    """A host's ramp: it begins at ``at`` (seconds, the store's clock) at ``start`` per second."""

    at: float
    start: float


def rate_at(policy: RatePolicy, ramp: Ramp | None, now: float) -> float | None:
    """Requests per second allowed at ``now``: ``None`` for no limit, 0.0 while held."""
    if ramp is None:
        return policy.rate
    elapsed = now - ramp.at
    if elapsed < 0:
        return 0.0
    if elapsed >= policy.slow_start:
        return policy.rate
    share = elapsed / policy.slow_start
    if policy.rate is None:
        return float(ramp.start * 2 ** (UNLIMITED_DOUBLINGS * share))
    if policy.rate <= ramp.start:
        return policy.rate
    return float(ramp.start * (policy.rate / ramp.start) ** share)


def ramp_over(policy: RatePolicy, ramp: Ramp | None, now: float) -> bool:
    """Whether ``ramp`` no longer changes anything at ``now`` (and may be forgotten)."""
    return ramp is None or now - ramp.at >= policy.slow_start


def ramp_share(policy: RatePolicy, ramp: Ramp | None, now: float) -> float:
    """How much of ``ramp`` is done at ``now``: 0.0 as it begins, below 0 while the
    host is held before it, 1.0 once over (and with no ramp or no slow start)."""
    if ramp is None or policy.slow_start <= 0:
        return 1.0
    return min(1.0, (now - ramp.at) / policy.slow_start)


def slowed(policy: RatePolicy, current: float | None) -> float:
    """The rate a host resumes at after a throttle: half ``current``, at least the floor
    (just the floor for a host that had no limit: there is no rate to halve)."""
    if current is None or current <= 0:
        return policy.floor
    return max(policy.floor, current / 2)


def throttled_ramp(policy: RatePolicy, ramp: Ramp | None, now: float, hold: float) -> Ramp:
    """The ramp after a throttle at ``now`` holding the host ``hold`` seconds."""
    current = rate_at(policy, ramp, now)
    if ramp is not None and ramp.at > now:
        current = ramp.start  # already held: halve what it would resume at
    return Ramp(max(now + hold, ramp.at if ramp is not None else now), slowed(policy, current))


def started_ramp(policy: RatePolicy, ramp: Ramp | None, now: float, ago: float = 0.0) -> Ramp:
    """The ramp after a breaker closed, or a pause ended, ``ago`` seconds before ``now``:
    from the floor at that moment, or when a hold running then ends.  Asked again about
    the same moment, it gives the same ramp, so processes that each learn of it agree."""
    began = now - ago
    return Ramp(max(began, ramp.at if ramp is not None else began), policy.floor)


class Turn(NamedTuple):
    """A rate store's answer: wait ``wait`` seconds; the turn is the delivery's if
    ``reserved`` (send then), else it is given back (ask again after the wait)."""

    reserved: bool
    wait: float


#: A turn now.
NOW = Turn(True, 0.0)


def take(
    policy: RatePolicy, ramp: Ramp | None, tat: float, now: float, within: float
) -> tuple[Turn, float]:
    """A delivery's turn at a host whose next free time is ``tat``, and the new ``tat``.

    The turn is the first moment not before ``now``, ``tat`` and the end of a hold; it
    is reserved (``tat`` moves on by one interval at the rate then) if at most ``within``
    seconds away.  A host without a limit then has every turn at once.
    """
    at = max(now, tat, ramp.at if ramp is not None else now)
    rate = rate_at(policy, ramp, at)
    if rate is None:
        at = max(now, ramp.at if ramp is not None else now)
        return Turn(at - now <= within, at - now), tat
    if at - now > within:
        return Turn(False, at - now), tat
    return Turn(True, at - now), at + 1 / rate


class RateRequest(NamedTuple):
    """A delivery asking for its turn at ``host``, reserving one up to ``within`` seconds away."""

    host: str
    policy: RatePolicy
    within: float


class RateStore(Protocol):
    """Where hosts' rates and ramps are kept; every method is safe from many threads."""

    def take_many(self, requests: Sequence[RateRequest]) -> list[Turn]:
        """Each request's turn, in the order asked."""
        ...

    def take_now(self, request: RateRequest) -> Turn | None:
        """:meth:`take_many`'s answer for one when it needs no I/O; ``None``: ask it
        where blocking is allowed."""
        ...

    def throttled(self, host: str, policy: RatePolicy, hold: float) -> None:
        """``host`` asked to wait ``hold`` seconds: hold it, then slow it down."""
        ...

    def started(self, host: str, policy: RatePolicy, ago: float = 0.0) -> None:
        """``host``'s breaker closed, or its pause ended, ``ago`` seconds ago: its rate
        starts again from the floor, as of then (see :func:`started_ramp`)."""
        ...

    def ramp_share(self, host: str) -> float:
        """How much of ``host``'s ramp is done now (:func:`ramp_share`), as this process
        last learnt it from the store; 1.0 for a host it knows no ramp of.  No I/O."""
        ...


def host_policy(
    host: str,
    default: float | None,
    rates: Mapping[str, float | None],
    floor: float,
    slow_start: float,
) -> RatePolicy:
    """The policy of ``host``: its own rate in ``rates`` if named, else ``default``."""
    return RatePolicy(rates.get(host.lower(), default), floor, slow_start)

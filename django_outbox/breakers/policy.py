"""Circuit breakers: the policy, a store's answers, and the protocol every store follows.

Holding back deliveries to destinations that keep failing:

After ``threshold`` failures in a row a breaker opens: deliveries are held, without a
request, for ``cool_off`` seconds.  Then one at a time is let through as a probe: success
closes it, failure reopens it, and a probe that never reports back (a crashed worker) is
given up after a cool-off.

While it is closed, a breaker also counts the deliveries it let through whose answer has
not come yet: failures plus those may never exceed ``threshold``, so a server that takes
connections and never answers gets at most ``threshold`` requests before its breaker
opens, however many workers send to it.  An admitted delivery stops counting when its
outcome is recorded, or after ``answer_within`` seconds (a worker that died).

A throttled answer (a ``429``) is not a failure: it holds the destination for the time
asked, and changes no count.  A breaker remembers until when it has held deliveries;
while such holds run, a success that closes it or frees a place answers ``True`` to
:meth:`BreakerStore.record`, so that the caller releases some of them early (the holds'
own ends stay as the upper bound).

:class:`~django_outbox.breakers.memory.MemoryBreakerStore` keeps breakers in one
process; :class:`~django_outbox.breakers.redis_store.RedisBreakerStore` shares them
between all workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, NamedTuple, Protocol
from urllib.parse import urlsplit

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
    spending an attempt; ``why`` says whether the breaker is ``open``, ``busy``
    (``threshold`` deliveries already await an answer) or ``throttled`` (a ``429``
    asked to wait).  Whatever is
    sent is reported to :meth:`BreakerStore.record` with this admission, whose
    ``token`` names it in the store (``None``: the store does not track it).
    """

    kind: Literal["pass", "probe", "held"]
    token: str | None = None
    retry_in: float = 0.0
    why: Literal["", "open", "busy", "throttled"] = ""


#: The admission of a delivery the store does not track.
PASS = Admission("pass")


class Report(NamedTuple):
    """How a delivery a store admitted went, as :meth:`BreakerStore.record` takes it."""

    key: str
    policy: BreakerPolicy
    failed: bool
    admission: Admission | None
    #: Seconds the destination asked to be left alone (a ``429``); 0.0: none.
    throttle: float = 0.0
    #: False when the delivery ended without a request (say, its payment failed first):
    #: no verdict on the destination, only its place (or its probe) given back.
    answered: bool = True


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
        self,
        key: str,
        policy: BreakerPolicy,
        *,
        failed: bool,
        admission: Admission | None,
        throttle: float = 0.0,
        answered: bool = True,
    ) -> bool:
        """Record how a delivery to ``key`` that ``admission`` let through went.

        Only the current probe's outcome closes or reopens an open breaker: other
        answers were sent before it opened and say nothing about the server now.
        ``admission`` is ``None`` for an outcome the store did not admit.  ``throttle``
        (seconds, not a failure) holds ``key`` that long.  ``answered`` False: no
        request was made after all; the admission's place is freed (a probe's, for
        the next delivery to probe) and nothing else changes.  True: the outcome
        closed the breaker or freed a place while deliveries held here still wait,
        which may come back now.
        """
        ...

    def admit_many(self, requests: Sequence[tuple[str, BreakerPolicy]]) -> list[Admission]:
        """:meth:`admit` for each ``(key, policy)`` in turn, their answers in that order."""
        ...

    def record_many(self, reports: Sequence[Report]) -> list[bool]:
        """:meth:`record` for each :class:`Report` in turn, their answers in that order."""
        ...

    def admit_now(self, key: str, policy: BreakerPolicy) -> Admission | None:
        """:meth:`admit`'s answer when it needs no I/O; ``None``: call :meth:`admit`
        where blocking is allowed (off the event loop)."""
        ...

    def record_now(self, report: Report) -> bool | None:
        """:meth:`record`'s answer when it needs no I/O; ``None``: call :meth:`record`
        where blocking is allowed."""
        ...

    def states(self, limit: int = 500) -> list[BreakerState]:
        """Up to ``limit`` open and half-open breakers, latest ``open_until`` first."""
        ...

    def reset(self, key: str) -> None:
        """Close the breaker for ``key`` and forget its failures."""
        ...


BreakerScope = Literal["host", "inbox"]
"""What one breaker is kept for: each host (the default), or each inbox URL."""


def breaker_key(host: str, inbox: str, scope: BreakerScope) -> str:
    """The key of the breaker that holds deliveries to ``inbox`` on ``host``.

    The scope is part of the key, so changing the setting never mixes counts.
    """
    if scope == "host":
        return f"host:{host.lower()}"
    if scope == "inbox":
        return f"inbox:{inbox}"
    raise OutboxConfigurationError(f'breaker scope is "host" or "inbox", not {scope!r}')


def breaker_host(key: str) -> str:
    """The host a breaker's key names (:func:`breaker_key`'s inverse, for the host):
    ``host:NAME``, or the host of ``inbox:URL``."""
    scope, _, rest = key.partition(":")
    if scope == "inbox":
        return (urlsplit(rest).hostname or "").lower()
    return rest.lower()


def held(retry_in: float, why: Literal["open", "busy", "throttled"]) -> Admission:
    """A ``held`` admission, waiting ``retry_in`` seconds (at least a millisecond)."""
    return Admission("held", retry_in=max(0.001, retry_in), why=why)


def breaker_state(key: str, failures: int, open_in: float, probe_in: float) -> BreakerState:
    """A breaker's state from seconds until it stops holding and until its probe ends."""
    return BreakerState(key, failures, datetime.now(UTC) + timedelta(seconds=open_in), probe_in > 0)


def latest(found: list[BreakerState], limit: int) -> list[BreakerState]:
    """The ``limit`` states that stop holding last."""
    return sorted(found, key=lambda state: state.open_until, reverse=True)[: max(0, limit)]


_HOLD_ERRORS = {
    "open": "held: the destination's circuit breaker is open",
    "busy": "held: {} deliveries to the destination await an answer",
    "throttled": "held: the destination asked to wait (429)",
}


def hold_error(why: str, threshold: int) -> str:
    """The ``last_error`` of a delivery held for ``why`` (an :attr:`Admission.why`)."""
    return _HOLD_ERRORS.get(why, _HOLD_ERRORS["open"]).format(threshold)


def releasable_errors(threshold: int) -> tuple[str, ...]:
    """The ``last_error`` of the holds a success may end early (open and busy breakers);
    a throttle lasts the time the destination asked."""
    return (hold_error("open", threshold), hold_error("busy", threshold))

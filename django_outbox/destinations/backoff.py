"""When a failed delivery is tried next, or whether it is given up.

The schedule: ``OUTBOX_RETRY_BASE`` seconds (30) before the second attempt,
doubling after each, capped at ``OUTBOX_RETRY_CAP`` (8 h), each wait up to a
quarter shorter at random so that a server's retries spread out.  With the
default 16 attempts the last is made 36 to 49 hours after the first, close to
Mastodon's two days.  A ``Retry-After`` (capped at ``OUTBOX_RETRY_AFTER_CAP``)
or an open circuit breaker lengthens the wait when ``OUTBOX_WAIT_AS_ASKED``
is on, and no retry is scheduled past the batch's deadline.  A ``429`` is throttling:
its ``Retry-After`` (capped at ``OUTBOX_THROTTLE_CAP``) holds the host, and the
delivery waits that long, or the schedule one step behind if that is longer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_outbox.conf import conf
from django_outbox.values.outcomes import INTERNAL, AttemptResult, Outcome, throttled

#: Seconds before a delivery whose attempt failed on our side (``failure`` internal) is
#: tried again (or ``OUTBOX_RETRY_BASE`` if shorter), doubling with its attempts: soon, as
#: the host did nothing wrong; the
#: attempts are still spent, so that a fault that lasts ends the delivery failed, with
#: its reason.
INTERNAL_RETRY_BASE = 5.0


#: Seconds a ``429`` without a ``Retry-After`` (or with ``OUTBOX_WAIT_AS_ASKED`` off)
#: holds its host.
THROTTLE_WAIT = 5.0

#: The most seconds a hold is lengthened at random (by a quarter of it at most), so
#: that the deliveries held together do not all come back at once.
HOLD_JITTER = 1.0


def throttle_for(status: int | None, asked: float | None) -> float:
    """Seconds a host that answered ``status`` is held, 0.0 for none: for a ``429``, its
    ``Retry-After`` ``asked`` (:data:`THROTTLE_WAIT` without one) at most
    ``OUTBOX_THROTTLE_CAP``: a hostile peer cannot hold its deliveries for long."""
    if not throttled(status):
        return 0.0
    wait = asked if asked is not None and conf.WAIT_AS_ASKED else THROTTLE_WAIT
    return min(max(wait, 0.0), conf.THROTTLE_CAP)


def schedule_delay(attempts: int, base: float | None = None) -> float:
    """Seconds to wait after the ``attempts``-th attempt failed, before jitter: ``base``
    (``OUTBOX_RETRY_BASE`` unless given) doubling, capped at ``OUTBOX_RETRY_CAP``."""
    exponent = min(max(attempts - 1, 0), 40)
    first = conf.RETRY_BASE if base is None else base
    return float(min(first * (2**exponent), conf.RETRY_CAP))


def jittered(delay: float) -> float:
    """``delay`` made up to a quarter shorter at random (never zero for a positive delay)."""
    return delay * (1.0 - random.random() / 4)


@dataclass(frozen=True)
class Decision:
    """Either a time to try again at, or why the delivery is given up."""

    retry_at: datetime | None
    give_up: str = ""
    deadline: bool = False


def next_attempt(
    *,
    now: datetime,
    attempts: int,
    max_attempts: int,
    deadline: datetime | None,
    asked: float | None = None,
    base: float | None = None,
    throttle: float = 0.0,
) -> Decision:
    """Decide what follows the ``attempts``-th failed attempt.

    ``asked`` is the wait a ``Retry-After`` header asked for, in seconds; ``base`` the
    first wait of the schedule, when not ``OUTBOX_RETRY_BASE``; ``throttle`` how long a
    ``429`` holds the host (:func:`throttle_for`), 0.0 for any other answer.
    """
    if attempts >= max_attempts:
        return Decision(None, f"gave up after {attempts} attempts")
    if throttle:
        # The schedule one step behind: the first 429 waits as asked, and a host that
        # keeps throttling still takes its deliveries' attempts no faster than failures.
        behind = jittered(schedule_delay(attempts - 1, base)) if attempts > 1 else 0.0
        delay = max(throttle, behind)
    else:
        delay = jittered(schedule_delay(attempts, base))
    if asked is not None and conf.WAIT_AS_ASKED:
        delay = max(delay, min(asked, conf.RETRY_AFTER_CAP))
    retry_at = now + timedelta(seconds=delay)
    if deadline is not None and retry_at >= deadline:
        return Decision(None, "the batch's deadline passed before the next attempt", True)
    return Decision(retry_at)


def held_until(now: datetime, hold: float, deadline: datetime | None) -> Decision:
    """When a delivery held for its host is tried again (no attempt spent), at most
    :data:`HOLD_JITTER` later than its hold ends: the upper bound, should no success
    release it sooner (:mod:`~django_outbox.store.holds`)."""
    wait = hold if conf.WAIT_AS_ASKED else min(hold, conf.RETRY_BASE)
    wait += random.random() * min(HOLD_JITTER, wait / 4)
    retry_at = now + timedelta(seconds=max(wait, 0.05))
    if deadline is not None and retry_at >= deadline:
        return Decision(None, "the batch's deadline passed while the host's breaker was open", True)
    return Decision(retry_at)


def decide(outcome: Outcome, now: datetime) -> Decision:
    """When the delivery of a failed, held, released, paying or expired ``outcome`` is
    tried next."""
    deadline = outcome.message.deadline
    if outcome.result is AttemptResult.EXPIRED:
        return Decision(None, "the batch's deadline passed before it was sent", True)
    if outcome.result is AttemptResult.HELD:
        return held_until(now, outcome.held_for or 0.0, deadline)
    if outcome.result in (AttemptResult.RELEASED, AttemptResult.PAYING):
        return Decision(now)
    return next_attempt(
        now=now,
        attempts=outcome.row.attempts,
        max_attempts=outcome.message.max_attempts,
        deadline=deadline,
        asked=None if throttled(outcome.status) else outcome.retry_after,
        base=min(INTERNAL_RETRY_BASE, conf.RETRY_BASE) if outcome.failure == INTERNAL else None,
        throttle=throttle_for(outcome.status, outcome.retry_after),
    )

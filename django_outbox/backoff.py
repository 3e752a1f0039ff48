"""When a failed delivery is tried next, or whether it is given up.

The schedule: ``OUTBOX_RETRY_BASE`` seconds (30) before the second attempt,
doubling after each, capped at ``OUTBOX_RETRY_CAP`` (8 h), each wait up to a
quarter shorter at random so that a server's retries spread out.  With the
default 16 attempts the last is made 36 to 49 hours after the first, close to
Mastodon's two days.  A ``Retry-After`` (capped at ``OUTBOX_RETRY_AFTER_CAP``)
or an open circuit breaker lengthens the wait when ``OUTBOX_WAIT_AS_ASKED``
is on, and no retry is scheduled past the batch's deadline.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_outbox.conf import conf
from django_outbox.outcomes import INTERNAL, AttemptResult, Outcome

#: Seconds before a delivery whose attempt failed on our side (``failure`` internal) is
#: tried again (or ``OUTBOX_RETRY_BASE`` if shorter), doubling with its attempts: soon, as
#: the host did nothing wrong; the
#: attempts are still spent, so that a fault that lasts ends the delivery failed, with
#: its reason.
INTERNAL_RETRY_BASE = 5.0


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
) -> Decision:
    """Decide what follows the ``attempts``-th failed attempt.

    ``asked`` is the wait a ``Retry-After`` header asked for, in seconds; ``base`` the
    first wait of the schedule, when not ``OUTBOX_RETRY_BASE``.
    """
    if attempts >= max_attempts:
        return Decision(None, f"gave up after {attempts} attempts")
    delay = jittered(schedule_delay(attempts, base))
    if asked is not None and conf.WAIT_AS_ASKED:
        delay = max(delay, min(asked, conf.RETRY_AFTER_CAP))
    retry_at = now + timedelta(seconds=delay)
    if deadline is not None and retry_at >= deadline:
        return Decision(None, "the batch's deadline passed before the next attempt", True)
    return Decision(retry_at)


def held_until(now: datetime, hold: float, deadline: datetime | None) -> Decision:
    """When a delivery an open breaker held is tried again (no attempt spent)."""
    wait = hold if conf.WAIT_AS_ASKED else min(hold, conf.RETRY_BASE)
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
        asked=outcome.retry_after,
        base=min(INTERNAL_RETRY_BASE, conf.RETRY_BASE) if outcome.failure == INTERNAL else None,
    )

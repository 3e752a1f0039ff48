"""A delivery's turn at its host's rate, and what its answer tells the host's rate.

Before an attempt asks the breaker, it asks the host rate store for its turn
(:mod:`django_outbox.breakers.rates`), with the other questions of its loop's turn.  A
turn within :data:`RESERVE_WITHIN` seconds (and before the delivery's send-by time) is
reserved and waited for on the event loop: the delivery keeps its slot in its host's
line, so the line, not a loop, bounds how many wait.  A later turn is not reserved:
the delivery is held (given back, no attempt spent) until about then, spread over up
to one more reservation window so that those given back together do not come back
together.  After the attempt, a ``429`` (or a ``503`` with ``Retry-After``) slows the
host down, and a breaker's probe that succeeded starts it slowly; so does the end of
the host's pause, which a worker process reads when it prepares a claim.  While the
host ramps, so does how many of its deliveries a process has under way at once
(:func:`host_cap`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from django.utils import timezone

from django_outbox.breakers.configured import rate_policy
from django_outbox.breakers.rates import RateRequest, RateStore
from django_outbox.conf import conf
from django_outbox.worker import breaker_turns

#: The longest wait for a turn, in seconds, spent on the event loop; longer ones are
#: given back to the queue.
RESERVE_WITHIN = 5.0

#: The ``last_error`` of a delivery given back to wait for its host's rate.
PACED_ERROR = "held: the destination's rate allows no request now"


async def wait_turn(rates: RateStore, host: str, send_by: float) -> float | None:
    """Wait for the delivery's turn at ``host`` and return ``None`` (send it now), or
    return the seconds to hold it for when its turn is too far away."""
    within = max(0.0, min(RESERVE_WITHIN, send_by - time.monotonic()))
    turn = await breaker_turns.take(rates, RateRequest(host.lower(), rate_policy(host), within))
    if not turn.reserved:
        return turn.wait + random.random() * min(turn.wait, RESERVE_WITHIN)
    if turn.wait > 0:
        await asyncio.sleep(turn.wait)
    return None


def host_cap(per_host: int, share: float) -> int:
    """How many deliveries to one host a process may have under way when ``share`` of
    its ramp is done: from one (as its breaker's probe) to ``per_host``, growing by a
    constant factor per second as its rate does."""
    return max(1, int(per_host ** min(1.0, max(0.0, share)) + 1e-9))  # 8 ** (2/3) is 3.999...


def ramped_caps(rates: RateStore | None, per_host: int) -> Callable[[str], int] | None:
    """The engine's ``host_cap``: :func:`host_cap` at the share of its ramp ``rates``
    last told this process of (``None`` when no host is spaced: ``per_host`` always)."""
    if rates is None:
        return None
    return lambda host: host_cap(per_host, rates.ramp_share(host.lower()))


def slow_down_for(status: int | None, retry_after: float | None, throttle: float) -> float:
    """Seconds a host that answered ``status`` is held before it resumes slower, 0.0 for
    no slow-down: a ``429``'s ``throttle``, or a ``503``'s ``Retry-After`` (at most
    ``OUTBOX_THROTTLE_CAP``)."""
    if throttle > 0:
        return throttle
    if status == 503 and retry_after is not None and conf.WAIT_AS_ASKED:
        return min(max(retry_after, 0.0), conf.THROTTLE_CAP)
    return 0.0


async def note(rates: RateStore, host: str, *, hold: float, probe_closed: bool) -> None:
    """Tell ``rates`` what an answer from ``host`` means: held ``hold`` seconds then
    slowed down, or (``probe_closed``) a slow start; nothing otherwise."""
    if hold <= 0 and not probe_closed:
        return
    policy = rate_policy(host)
    loop = asyncio.get_running_loop()
    if hold > 0:
        await loop.run_in_executor(None, rates.throttled, host.lower(), policy, hold)
    else:
        await loop.run_in_executor(None, rates.started, host.lower(), policy)


def start_after_pauses(rates: RateStore | None, ended: Mapping[str, datetime]) -> None:
    """Begin a slow start at each host of ``ended`` as of when its pause ended (its
    value), so that the held backlog meets the floor rate, not the full one (a ramp
    that began a whole slow start ago is over: the store keeps nothing of it)."""
    if rates is None:
        return
    now = timezone.now()
    for host, at in ended.items():
        rates.started(host.lower(), rate_policy(host), max(0.0, (now - at).total_seconds()))

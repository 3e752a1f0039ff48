"""Arming the faults of ``testproject/faults.py`` in real worker processes, and reading
when they fired.

A worker started with :func:`fault_settings` wraps the functions that
``testproject.faults.POINTS`` names; :class:`Faults` arms one (``raise`` or ``hang``, a
number of firings, shared by every worker process) and reads the notes each firing
leaves: which process, when, and how many deliveries were being sent.  :func:`check`
is what every partial-failure test asserts after its fault.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState, Heartbeat
from testproject.faults import FIRED, POINTS, PREFIX
from tests.support.chaos import Farm, Workers, children, report, wait_until
from tests.support.workers import Worker

#: Seconds an armed hang blocks: longer than any test waits.
HANG = 600.0
#: Seconds after the fault within which every delivery is accounted for (issue 21).
BOUND = 30.0


def fault_settings(redis_url: str) -> dict[str, Any]:
    """The worker settings that install the fault points (and nothing else changes)."""
    return {"OUTBOX_TEST_FAULTS": redis_url}


@dataclass(frozen=True)
class Firing:
    """One firing of an armed fault."""

    point: str
    pid: int
    at: float
    #: Deliveries in ``sending`` when it fired (all processes).
    sending: int


class Faults:
    """The fault plan in the Redis at ``url``, cleared when made."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=5)
        self.clear()

    def clear(self) -> None:
        keys = list(self.client.scan_iter(PREFIX + "*"))
        if keys:
            self.client.delete(*keys)

    def arm(self, point: str, kind: str, times: int = 1, seconds: float = HANG) -> None:
        """Fire ``kind`` (``raise`` or ``hang`` for ``seconds``) at ``point``'s next
        ``times`` calls, in whichever worker processes make them."""
        if point not in POINTS:
            raise ValueError(f"no fault point {point!r}")
        if kind not in ("raise", "hang"):
            raise ValueError(f"no fault kind {kind!r}")
        self.client.set(PREFIX + point + ":left", times)
        self.client.set(PREFIX + point, json.dumps({"kind": kind, "seconds": seconds}))

    def fired(self) -> list[Firing]:
        """Every firing so far, in order."""
        return [Firing(**json.loads(raw)) for raw in self.client.lrange(FIRED, 0, -1)]

    def wait_fired(self, count: int = 1, timeout: float = 60.0) -> list[Firing]:
        """The first ``count`` firings, waiting for them up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while len(found := self.fired()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"the fault fired {len(found)} times, not {count}")
            time.sleep(0.05)
        return found[:count]


# -- what a partial-failure test checks ----------------------------------------------


def start(chaos_workers: Workers, redis_url: str, **settings: Any) -> Worker:
    """The README's worker (two pool processes) with the fault points and ``settings``."""
    (worker,) = chaos_workers.start(1, extra={**fault_settings(redis_url), **settings})
    return worker


def accounted(inboxes: list[str]) -> bool:
    """Every delivery to ``inboxes`` exists, none is in ``sending``, and every one not
    delivered has a recorded reason."""
    rows = Delivery.objects.filter(inbox__in=inboxes)
    live = rows.exclude(state=DeliveryState.DELIVERED)
    return (
        rows.count() == len(inboxes)
        and not live.filter(Q(state=DeliveryState.SENDING) | Q(last_error="")).exists()
    )


def all_delivered(inboxes: list[str]) -> bool:
    """Whether the deliveries to ``inboxes`` are all delivered."""
    found = Delivery.objects.filter(inbox__in=inboxes, state=DeliveryState.DELIVERED)
    return found.count() == len(inboxes)


def whole(worker: Worker, processes: int = 2) -> bool:
    """The worker's pool has ``processes`` processes, each beating with every part
    alive and none stuck."""
    pool = set(children(worker.pid))
    if len(pool) != processes:
        return False
    fresh = Heartbeat.objects.filter(beat_at__gte=timezone.now() - timedelta(seconds=6))
    rows = [row for row in fresh if int(row.name.split(":")[1]) in pool]
    if {int(row.name.split(":")[1]) for row in rows} != pool:
        return False
    return all(
        part["alive"] and not part["stuck"] for row in rows for part in row.parts.values()
    ) and all(row.parts for row in rows)


def check(
    name: str,
    farm: Farm,
    inboxes: list[str],
    firing: Firing,
    worker: Worker,
    *,
    settled: Callable[[list[str]], bool] = accounted,
    accepted_only: bool = False,
) -> None:
    """The three checks of the module docstring, with the figures printed."""
    wait_until(lambda: settled(inboxes), BOUND + 30)
    took = time.time() - firing.at
    wait_until(lambda: all_delivered(inboxes), 120, every=0.25)
    delivered_after = time.time() - firing.at
    tally = farm.tally(inboxes, accepted_only)
    report(
        name,
        accounted_after=round(took, 1),
        delivered_after=round(delivered_after, 1),
        sending_at_fault=firing.sending,
        tally=tally,
    )
    assert took <= BOUND, f"{name}: accounted for {took:.1f} s after the fault"
    assert tally.missing == 0, f"{name}: {tally}"
    assert tally.duplicates <= max(0, firing.sending), f"{name}: {tally}"
    wait_until(lambda: whole(worker), 60, every=0.5)

"""Arming the faults of ``testproject/faults.py`` in real worker processes, and reading
when they fired.

A worker started with :func:`fault_settings` wraps the functions that
``testproject.faults.POINTS`` names; :class:`Faults` arms one (``raise`` or ``hang``, a
number of firings, shared by every worker process) and reads the notes each firing
leaves: which process, when, and how many deliveries were being sent.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from testproject.faults import FIRED, POINTS, PREFIX

#: Seconds an armed hang blocks: longer than any test waits.
HANG = 600.0


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

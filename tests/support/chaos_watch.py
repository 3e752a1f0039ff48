"""Timing recoveries: from each fault until what it left stuck moves again.

A chaos test tells :class:`Recoveries` of each fault as it injects it, with a
count of the deliveries the fault left stuck (claimed by a killed process, or
queued with their message erased); a thread polls the counts and notes when
each reaches zero.  Polled, not computed afterwards: the rows keep no history
of their claims.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from tests.support.chaos import db_safe, drive

#: Seconds between two looks.
_EVERY = 0.2


@dataclass
class Fault:
    """One fault: its name, when it struck, what counts what it left stuck, and when
    that count was first seen at zero."""

    name: str
    at: float
    stuck: Callable[[], int]
    recovered: float | None = None

    @property
    def seconds(self) -> float | None:
        """Seconds from the fault to its recovery, or ``None`` while stuck."""
        return None if self.recovered is None else round(self.recovered - self.at, 1)


class Recoveries:
    """The faults of one test and their recovery times, watched on a thread."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="recoveries", daemon=True)
        self._thread.start()

    def fault(self, name: str, stuck: Callable[[], int], at: float | None = None) -> None:
        """Note the fault ``name`` (now, or at the monotonic time ``at``)."""
        with self._lock:
            self.faults.append(Fault(name, time.monotonic() if at is None else at, stuck))

    def _watch(self) -> None:
        try:
            while not self._done.wait(_EVERY):
                with self._lock:
                    waiting = [fault for fault in self.faults if fault.recovered is None]
                for fault in waiting:
                    if db_safe(fault.stuck, 1) == 0:
                        fault.recovered = time.monotonic()
        finally:
            connection.close()  # this thread's

    def wait(self, timeout: float) -> dict[str, float | None]:
        """Wait until every fault recovered (or ``timeout``), stop watching, and return
        the seconds each took (``None``: not within the timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(f.recovered is None for f in self.faults):
            time.sleep(_EVERY)
        self._done.set()
        self._thread.join(10)
        return {fault.name: fault.seconds for fault in self.faults}

    def settle(self, expected: int, started: float) -> tuple[float, dict[str, float | None]]:
        """Wait until ``expected`` deliveries exist and none is live, then for the
        recoveries: the seconds since ``started`` (monotonic) it all took, and
        :meth:`wait`'s answer."""
        drive(expected, 120)
        seconds = round(time.monotonic() - started, 1)
        return seconds, self.wait(30)

    def lose_messages(self, name: str, fault: Callable[[], None]) -> int:
        """Inject ``fault``, by which the broker loses its messages, and watch the
        deliveries queued at that moment until each was published again or claimed;
        returns how many were queued."""
        now = timezone.now()
        queued = list(
            Delivery.objects.filter(state=DeliveryState.QUEUED).values_list("id", flat=True)
        )
        at = time.monotonic()
        fault()
        old = Q(dispatched_at__isnull=True) | Q(dispatched_at__lte=now)
        lost = Delivery.objects.filter(old, id__in=queued, state=DeliveryState.QUEUED)
        self.fault(name, lost.count, at=at)
        return len(queued)

"""Where the workers' counters are kept, so that one scrape sees every process.

Celery's prefork pool runs deliveries in several processes, often on several
machines; counters kept in each process's memory would be seen only by a scrape
of that process.  So each worker process writes its sums to one Redis hash
(``HINCRBY``, one pipelined round trip a second at most), and any process can
read the totals: a web process serving ``/metrics``, the ``outbox status``
command, the admin.  Without Redis (``OUTBOX_METRICS_CACHE`` and
``OUTBOX_BREAKER_CACHE`` unset) they stay in this process's memory, which is
right only when one process both sends and serves the metrics.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import redis

from django_outbox.breakers.redis_store import cache_client
from django_outbox.conf import conf

#: Recent attempts kept for ``outbox status`` quantiles and the slowest hosts.
WINDOW = 5000


class MetricsStore(Protocol):
    """Counters, recent attempt times and each worker process's engine usage."""

    def add(self, fields: Mapping[str, int | float], timings: Sequence[str]) -> None:
        """Add ``fields`` to the counters and push ``timings`` onto the recent window."""
        ...

    def counters(self) -> dict[str, float]:
        """Every counter's total."""
        ...

    def timings(self) -> list[str]:
        """The recent attempts' ``"host seconds"``, newest first, at most :data:`WINDOW`."""
        ...

    def report(self, process: str, usage: str) -> None:
        """Store ``usage`` (``"in-flight capacity unix-time"``) as ``process``'s latest."""
        ...

    def processes(self) -> dict[str, str]:
        """Each process's latest usage report."""
        ...

    def forget(self, *processes: str) -> None:
        """Drop the usage reports of stopped or vanished processes."""
        ...

    def clear(self) -> None:
        """Forget everything (tests, and operators starting afresh)."""
        ...


class MemoryMetricsStore:
    """A :class:`MetricsStore` in this process's memory (no Redis configured)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, float] = {}
        self._timings: deque[str] = deque(maxlen=WINDOW)
        self._processes: dict[str, str] = {}

    def add(self, fields: Mapping[str, int | float], timings: Sequence[str]) -> None:
        with self._lock:
            for field, amount in fields.items():
                self._counters[field] = self._counters.get(field, 0) + amount
            self._timings.extend(timings)

    def counters(self) -> dict[str, float]:
        with self._lock:
            return dict(self._counters)

    def timings(self) -> list[str]:
        with self._lock:
            return list(reversed(self._timings))

    def report(self, process: str, usage: str) -> None:
        with self._lock:
            self._processes[process] = usage

    def processes(self) -> dict[str, str]:
        with self._lock:
            return dict(self._processes)

    def forget(self, *processes: str) -> None:
        with self._lock:
            for process in processes:
                self._processes.pop(process, None)

    def clear(self) -> None:
        with self._lock:
            self._counters.clear()
            self._timings.clear()
            self._processes.clear()


class RedisMetricsStore:
    """A :class:`MetricsStore` in Redis: a hash of counters, a list, a hash of reports."""

    def __init__(self, client: Callable[[], redis.Redis], prefix: str = "outbox:metrics:") -> None:
        self._client = client
        self._counters = prefix + "counters"
        self._timings = prefix + "timings"
        self._processes = prefix + "processes"

    def add(self, fields: Mapping[str, int | float], timings: Sequence[str]) -> None:
        pipe = self._client().pipeline(transaction=False)
        for field, amount in fields.items():
            if isinstance(amount, int):
                pipe.hincrby(self._counters, field, amount)
            else:
                pipe.hincrbyfloat(self._counters, field, amount)
        if timings:
            pipe.lpush(self._timings, *timings[-WINDOW:])
            pipe.ltrim(self._timings, 0, WINDOW - 1)
        pipe.execute()

    def counters(self) -> dict[str, float]:
        found = self._client().hgetall(self._counters)
        return {_text(field): float(value) for field, value in found.items()}

    def timings(self) -> list[str]:
        return [_text(entry) for entry in self._client().lrange(self._timings, 0, WINDOW - 1)]

    def report(self, process: str, usage: str) -> None:
        self._client().hset(self._processes, process, usage)

    def processes(self) -> dict[str, str]:
        found = self._client().hgetall(self._processes)
        return {_text(process): _text(usage) for process, usage in found.items()}

    def forget(self, *processes: str) -> None:
        if processes:
            self._client().hdel(self._processes, *processes)

    def clear(self) -> None:
        self._client().delete(self._counters, self._timings, self._processes)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


_memory = MemoryMetricsStore()


def configured_metrics_store() -> MetricsStore:
    """The store the settings ask for: Redis through a django-redis alias, or memory.

    The alias is ``OUTBOX_METRICS_CACHE``, by default ``OUTBOX_BREAKER_CACHE``.
    """
    alias = conf.METRICS_CACHE
    return _memory if alias is None else RedisMetricsStore(cache_client(alias))

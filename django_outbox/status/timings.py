"""Quantiles of recent times, and the slowest hosts among recent attempts.

Like Bison Relay's queue, which keeps the last few hundred send times and
reports their quantiles, the workers keep the last
:data:`~django_outbox.counters.shared.WINDOW` attempts (host and seconds) in the
shared metrics store; send-to-settle times come from the database.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Quantiles:
    """The 50th, 90th and 99th percentiles of ``samples`` times, in seconds."""

    samples: int
    p50: float
    p90: float
    p99: float

    def as_dict(self) -> dict[str, float | int]:
        """The quantiles as JSON-ready numbers."""
        return {"samples": self.samples, "p50": self.p50, "p90": self.p90, "p99": self.p99}


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``ordered``, which is sorted and not empty."""
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def quantiles(values: Iterable[float]) -> Quantiles | None:
    """The p50/p90/p99 of ``values``; ``None`` when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return Quantiles(
        len(ordered),
        round(quantile(ordered, 0.5), 4),
        round(quantile(ordered, 0.9), 4),
        round(quantile(ordered, 0.99), 4),
    )


@dataclass(frozen=True)
class HostTime:
    """A host's recent attempt times."""

    host: str
    attempts: int
    p90: float
    slowest: float


def parse_timings(entries: Iterable[str]) -> list[tuple[str, float]]:
    """The store's ``"host seconds"`` entries as pairs; malformed ones are skipped."""
    pairs: list[tuple[str, float]] = []
    for entry in entries:
        host, _, seconds = entry.rpartition(" ")
        try:
            pairs.append((host, float(seconds)))
        except ValueError:
            continue
    return pairs


def slowest_hosts(pairs: Iterable[tuple[str, float]], limit: int = 10) -> list[HostTime]:
    """The ``limit`` hosts whose recent attempts took longest (by p90), slowest first."""
    by_host: defaultdict[str, list[float]] = defaultdict(list)
    for host, seconds in pairs:
        by_host[host].append(seconds)
    times = []
    for host, values in by_host.items():
        values.sort()
        times.append(HostTime(host, len(values), round(quantile(values, 0.9), 4), values[-1]))
    times.sort(key=lambda time: (-time.p90, time.host))
    return times[:limit]

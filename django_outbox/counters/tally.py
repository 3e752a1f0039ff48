"""The worker's metrics, their names, and a :class:`Tally` that adds them up cheaply.

A tally counts under tuple keys (a dictionary update costs a fraction of a
microsecond) and spells them out as store fields only when it is written:
``name|label=value|label=value``.  Label values are closed sets (states, lanes,
result classes, schemes, bucket bounds): never an inbox URL or a host.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterator

FINISHED = "outbox_deliveries_finished_total"
ATTEMPTS = "outbox_attempts_total"
REQUESTS = "outbox_requests_total"
ATTEMPT_SECONDS = "outbox_attempt_duration_seconds"
SETTLE_SECONDS = "outbox_send_to_settle_seconds"
FANOUT = "outbox_fanout_inboxes"

#: Bucket bounds (seconds) of the attempt duration and send-to-settle histograms.
ATTEMPT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SETTLE_BUCKETS = (
    *(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
    *(900.0, 3600.0, 4 * 3600.0, 86400.0, 3 * 86400.0),
)
#: Bucket bounds (inboxes) of the fan-out histogram: a reply, a post, a popular post.
FANOUT_BUCKETS = (1, 2, 5, 10, 50, 100, 500, 1_000, 5_000, 10_000, 50_000, 100_000)
HISTOGRAMS: dict[str, tuple[float, ...]] = {
    ATTEMPT_SECONDS: ATTEMPT_BUCKETS,
    SETTLE_SECONDS: SETTLE_BUCKETS,
    FANOUT: FANOUT_BUCKETS,
}

#: A counter's key: its name, then label names and values in turn.
Key = tuple[str, ...]


def bound_label(bound: float) -> str:
    """A bucket bound as Prometheus writes ``le``: ``0.5``, ``1.0``, ``+Inf``."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


_LE = {name: [*map(bound_label, bounds), "+Inf"] for name, bounds in HISTOGRAMS.items()}
#: The bucket keys and the sum key of each histogram and label set (both bounded sets).
_KEYS: dict[tuple[str, tuple[str, ...]], tuple[list[Key], Key]] = {}


def encode(key: Key) -> str:
    """A key as a store field: ``name|label=value|...``."""
    name, *pairs = key
    return "|".join([name, *(f"{k}={v}" for k, v in zip(pairs[::2], pairs[1::2], strict=True))])


def decode(field: str) -> tuple[str, dict[str, str]]:
    """A store field as its metric name and labels."""
    name, *pairs = field.split("|")
    return name, dict(pair.split("=", 1) for pair in pairs)


class Tally:
    """Counts and histogram observations added up in memory, written in one go.

    Not thread-safe: one thread fills a tally, and hands it over whole.
    """

    def __init__(self) -> None:
        self.counts: Counter[Key] = Counter()
        self.sums: defaultdict[Key, float] = defaultdict(float)
        #: Recent attempts as ``"host seconds"``, newest last.
        self.timings: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.counts or self.timings)

    def count(self, key: Key, amount: int = 1) -> None:
        """Add ``amount`` to the counter ``key``."""
        self.counts[key] += amount

    def observe(self, name: str, value: float, *labels: str) -> None:
        """Count ``value`` in the histogram ``name`` (``labels``: names and values in turn)."""
        keys = _KEYS.get((name, labels))
        if keys is None:
            buckets = [(f"{name}_bucket", *labels, "le", le) for le in _LE[name]]
            keys = _KEYS.setdefault((name, labels), (buckets, (f"{name}_sum", *labels)))
        self.counts[keys[0][bisect_left(HISTOGRAMS[name], value)]] += 1
        self.sums[keys[1]] += value

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts, sums and timings to this tally."""
        self.counts.update(other.counts)
        for key, value in other.sums.items():
            self.sums[key] += value
        self.timings.extend(other.timings)

    def fields(self) -> Iterator[tuple[str, int | float]]:
        """Every count and sum as ``(field, amount)``."""
        for key, amount in self.counts.items():
            yield encode(key), amount
        for key, total in self.sums.items():
            yield encode(key), total

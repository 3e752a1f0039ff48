"""The Prometheus collector: the workers' counters, and gauges read from the database.

Counters and histograms come from the shared store at every scrape (one Redis
``HGETALL``).  Gauges come from a :func:`~django_outbox.status.snapshot.cached_snapshot`
at most ``OUTBOX_METRICS_TTL`` seconds old, so scrapes, however frequent, query
the database at most that often per process.  Imported only by
:mod:`~django_outbox.metrics.prometheus`, once ``prometheus-client`` is known to
be installed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from django_outbox.breakers import BreakerState
from django_outbox.breakers.policy import breaker_host
from django_outbox.conf import conf
from django_outbox.counters.shared import configured_metrics_store
from django_outbox.counters.tally import (
    ATTEMPT_SECONDS,
    ATTEMPTS,
    FANOUT,
    FINISHED,
    HISTOGRAMS,
    REQUESTS,
    SETTLE_SECONDS,
    bound_label,
    decode,
)
from django_outbox.extensions.registry import active
from django_outbox.metrics.destinations import DestinationGauges, destination_gauges
from django_outbox.models import FINAL_STATES, Lane
from django_outbox.signing.http import Scheme
from django_outbox.signing.webhooks import WEBHOOK_SCHEME
from django_outbox.status.processes import ProcessStatus
from django_outbox.status.snapshot import STATES, Snapshot, cached_snapshot

logger = logging.getLogger("django_outbox.metrics")

#: ``outbox_attempts_total``'s result classes, each exposed even while zero.
RESULT_CLASSES = ("2xx", "3xx", "4xx", "5xx", "timeout", "connect", "blocked", "error", "held")
#: Counters: help text, label names, and the label values always exposed.
COUNTERS: dict[str, tuple[str, tuple[str, ...], list[tuple[str, ...]]]] = {
    FINISHED: (
        "Deliveries that reached a final state, by that state and lane.",
        ("state", "lane"),
        [(state.value, lane.value) for state in FINAL_STATES for lane in Lane],
    ),
    ATTEMPTS: (
        "Delivery attempts by how they ended: the answer's class, no answer, or held.",
        ("result",),
        [(kind,) for kind in RESULT_CLASSES],
    ),
    REQUESTS: (
        "HTTP requests made, by signature scheme (a second knock is a second request).",
        ("scheme",),
        [*((scheme.value,) for scheme in Scheme), (WEBHOOK_SCHEME,)],
    ),
}
HISTOGRAM_HELP = {
    ATTEMPT_SECONDS: ("Seconds an attempt's requests took.", ()),
    SETTLE_SECONDS: ("Seconds from send() to a delivery's final state, by lane.", ("lane",)),
    FANOUT: ("Distinct inboxes or endpoints of each committed send.", ()),
}
#: Failing hosts exposed with a ``host`` label at most (the worst, by failed attempts).
TOP_HOSTS = 10


class OutboxCollector:
    """Collects the outbox's metrics for ``prometheus_client``."""

    def describe(self) -> list[Metric]:
        """Nothing: registering must not query the database or Redis."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Every metric; what cannot be read is left out and logged, never raised."""
        up = GaugeMetricFamily(
            "outbox_metrics_store_up", "Whether the workers' shared counters could be read."
        )
        try:
            fields = configured_metrics_store().counters()
        except Exception:
            logger.warning("cannot read the workers' counters", exc_info=True)
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
            yield from counter_families(fields)
        yield up
        try:
            snapshot = cached_snapshot(conf.METRICS_TTL)
        except Exception:
            logger.warning("cannot read the outbox's status from the database", exc_info=True)
            return
        yield from gauge_families(snapshot)
        yield from breaker_families(snapshot.breakers)
        try:
            gauges = destination_gauges(conf.METRICS_TTL)
        except Exception:
            logger.warning("cannot read the hosts' backlog", exc_info=True)
        else:
            yield from destination_families(gauges)
        for extension in active():
            try:
                yield from extension.metric_families(conf.METRICS_TTL)
            except Exception:
                logger.warning("cannot read the gauges of %s", extension.name, exc_info=True)


def counter_families(fields: dict[str, float]) -> Iterator[Metric]:
    """The counters and histograms kept in the store's ``fields``."""
    counts: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    buckets: dict[str, dict[tuple[str, ...], dict[str, float]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    sums: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    for field, value in fields.items():
        name, labels = decode(field)
        if name in COUNTERS:
            counts[name][tuple(labels[label] for label in COUNTERS[name][1])] = value
        elif name.endswith("_bucket") and name[:-7] in HISTOGRAMS:
            le = labels.pop("le")
            buckets[name[:-7]][tuple(labels.values())][le] = value
        elif name.endswith("_sum") and name[:-4] in HISTOGRAMS:
            sums[name[:-4]][tuple(labels.values())] = value
    for name, (help_text, label_names, always) in COUNTERS.items():
        family = CounterMetricFamily(name, help_text, labels=label_names)
        found = counts[name]
        for values in [*always, *(values for values in found if values not in always)]:
            family.add_metric(list(values), found.get(values, 0.0))
        yield family
    for name, bounds in HISTOGRAMS.items():
        help_text, label_names = HISTOGRAM_HELP[name]
        histogram = HistogramMetricFamily(name, help_text, labels=label_names)
        found_buckets = buckets[name] or ({(): {}} if not label_names else {})
        for values, per_bound in sorted(found_buckets.items()):
            histogram.add_metric(
                list(values), _cumulative(per_bound, bounds), sums[name].get(values, 0.0)
            )
        yield histogram


def _cumulative(per_bound: dict[str, float], bounds: Iterable[float]) -> list[tuple[str, float]]:
    total, result = 0.0, []
    for le in [*map(bound_label, bounds), "+Inf"]:
        total += per_bound.get(le, 0.0)
        result.append((le, total))
    return result


def gauge_families(snapshot: Snapshot) -> Iterator[Metric]:
    """The gauges of a database snapshot."""
    deliveries = GaugeMetricFamily(
        "outbox_deliveries", "Deliveries in the table, by state and lane.", labels=("state", "lane")
    )
    due = GaugeMetricFamily(
        "outbox_deliveries_due", "Queued deliveries whose time has come, by lane.", labels=["lane"]
    )
    oldest = GaugeMetricFamily(
        "outbox_oldest_due_age_seconds",
        "Seconds the longest-waiting due delivery has waited past its time (0: none), by lane.",
        labels=["lane"],
    )
    for lane in snapshot.lanes:
        for state in STATES:
            deliveries.add_metric([state, lane.lane], lane.counts[state])
        due.add_metric([lane.lane], lane.due)
        oldest.add_metric([lane.lane], lane.oldest_due or 0.0)
    yield from (deliveries, due, oldest)
    yield GaugeMetricFamily(
        "outbox_hosts_failing",
        "Hosts that failed and have not succeeded since.",
        value=snapshot.hosts_failing,
    )
    yield GaugeMetricFamily(
        "outbox_hosts_unavailable",
        "Hosts marked unavailable: their deliveries are skipped.",
        value=snapshot.hosts_unavailable,
    )
    worst = GaugeMetricFamily(
        "outbox_host_failed_attempts",
        f"Failed attempts in the last hour of the {TOP_HOSTS} worst hosts (a bounded set).",
        labels=["host"],
    )
    for host in snapshot.failing[:TOP_HOSTS]:
        worst.add_metric([host.host], host.failures)
    yield worst
    yield GaugeMetricFamily(
        "outbox_breakers_open",
        "Open and half-open circuit breakers (counted up to 100).",
        value=len(snapshot.breakers),
    )
    processes, in_flight, capacity = snapshot.engine
    yield GaugeMetricFamily(
        "outbox_worker_processes",
        "Worker processes that reported in the last minute.",
        value=processes,
    )
    yield GaugeMetricFamily(
        "outbox_engine_in_flight",
        "Deliveries in flight in the worker processes' engines.",
        value=in_flight,
    )
    yield GaugeMetricFamily(
        "outbox_engine_capacity",
        "Deliveries the worker processes' engines may have in flight at most.",
        value=capacity,
    )
    yield from process_families(snapshot.processes)
    yield GaugeMetricFamily(
        "outbox_snapshot_timestamp_seconds",
        "When the database was last read for these gauges (Unix time).",
        value=snapshot.taken_at.timestamp(),
    )
    yield GaugeMetricFamily(
        "outbox_snapshot_duration_seconds",
        "Seconds reading the database took.",
        value=snapshot.took,
    )


def process_families(processes: Sequence[ProcessStatus]) -> Iterator[Metric]:
    """The gauges of the worker processes' heartbeat rows: who beats, who leads, what
    ails them, and what their recorders have not saved yet."""
    beating = [process for process in processes if process.beating]
    yield GaugeMetricFamily(
        "outbox_processes_beating",
        "Worker processes that beat within the heartbeat timeout.",
        value=len(beating),
    )
    yield GaugeMetricFamily(
        "outbox_process_leaders",
        "Beating worker processes that run the recovery passes (1 when all is well).",
        value=sum(process.leader for process in beating),
    )
    yield GaugeMetricFamily(
        "outbox_recorder_backlog",
        "Outcomes the beating processes' recorders had not saved at their last beat.",
        value=sum(process.backlog for process in beating),
    )
    yield GaugeMetricFamily(
        "outbox_process_last_beat_age_seconds",
        "Seconds since the beat of the process that has been silent longest (beating ones).",
        value=max((process.silent_for for process in beating), default=0.0),
    )
    unwell = GaugeMetricFamily(
        "outbox_process_parts_unwell",
        "Beating worker processes whose part was dead or stuck at their last beat, by part.",
        labels=["part"],
    )
    counts: dict[str, int] = {}
    for process in beating:
        for part in process.parts:
            counts.setdefault(part, 0)
        for part in process.unwell:
            counts[part] += 1
    for part, count in sorted(counts.items()):
        unwell.add_metric([part], count)
    yield unwell


def breaker_families(breakers: Sequence[BreakerState]) -> Iterator[Metric]:
    """The open breakers of the :data:`TOP_HOSTS` hosts with the most failures."""
    family = GaugeMetricFamily(
        "outbox_host_breaker_open",
        f"Open breakers of the {TOP_HOSTS} hosts with the most failures (1), by whether "
        "a probe is under way (half-open).",
        labels=["host", "probing"],
    )
    worst = sorted(breakers, key=lambda state: -state.failures)[:TOP_HOSTS]
    for state in worst:
        family.add_metric([breaker_host(state.key), str(state.probing).lower()], 1)
    yield family


def destination_families(gauges: DestinationGauges) -> Iterator[Metric]:
    """The hosts' backlog ages."""
    backlog = GaugeMetricFamily(
        "outbox_host_backlog_age_seconds",
        f"Seconds the oldest due delivery of each of the {TOP_HOSTS} longest-waiting hosts "
        "has waited past its time.",
        labels=["host"],
    )
    for host, age in gauges.backlog_ages:
        backlog.add_metric([host], age)
    yield backlog

"""One look at the whole outbox: queue depth, age, throughput, latency, failing hosts.

Each number comes from an aggregate query that an index answers, or from the
workers' shared metrics store, so a snapshot costs the same with a million
rows as with a thousand, give or take the count of rows per state (an index
scan).  Scrapes reuse one for ``OUTBOX_METRICS_TTL`` seconds
(:func:`cached_snapshot`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, QuerySet
from django.db.models.functions import Trunc
from django.utils import timezone

from django_outbox.breakers import BreakerState, BreakerStoreUnavailable
from django_outbox.breakers.configured import configured_store
from django_outbox.counters.shared import configured_metrics_store
from django_outbox.models import Attempt, Delivery, DeliveryState, Host, Lane
from django_outbox.status.fresh import Fresh
from django_outbox.status.processes import ProcessStatus, process_statuses
from django_outbox.status.timings import (
    HostTime,
    Quantiles,
    parse_timings,
    quantiles,
    slowest_hosts,
)
from django_outbox.values.outcomes import AttemptResult

#: Seconds of finished deliveries that throughput and send-to-settle look at.
RECENT = 300
#: Finished deliveries, newest first, whose send-to-settle times are sampled.
SETTLE_SAMPLE = 5000
#: A worker process whose last report is older than this has stopped or died.
REPORT_STALE = 60.0
STATES = [state.value for state in DeliveryState]
LANES = [lane.value for lane in Lane]
#: Results of the attempt history's rows that are failed attempts: not a late success,
#: not a 402 whose invoice was stored to be paid, and not a hold (no request was made).
FAILED_RESULTS = (AttemptResult.RETRY.value, AttemptResult.REFUSED.value)


def failed_attempts() -> QuerySet[Attempt]:
    """The rows of the attempt history that are failed attempts (:data:`FAILED_RESULTS`)."""
    return Attempt.objects.filter(held=False, result__in=FAILED_RESULTS)


@dataclass(frozen=True)
class LaneStatus:
    """One lane's deliveries by state, and how far behind it is."""

    lane: str
    counts: dict[str, int]
    #: Queued deliveries whose time has come.
    due: int
    #: Seconds the longest-waiting due delivery has waited past its time.
    oldest_due: float | None


@dataclass(frozen=True)
class FailingHost:
    """A host that has been failing: its Host row and its recent failed attempts."""

    host: str
    failure_days: int
    unavailable_since: datetime | None
    #: Failed attempts in the last hour (from the attempt history).
    failures: int
    last_failure: datetime | None


@dataclass(frozen=True)
class Snapshot:
    """Everything ``outbox status`` prints, the overview draws and the gauges expose."""

    taken_at: datetime
    lanes: list[LaneStatus]
    #: ``[(minute, {state: count})]`` of deliveries finished in the last :data:`RECENT` s.
    per_minute: list[tuple[datetime, dict[str, int]]]
    settle: Quantiles | None
    attempt: Quantiles | None
    slowest: list[HostTime]
    hosts_failing: int
    hosts_unavailable: int
    #: Hosts with the most failed attempts in the last hour, then the longest failing.
    failing: list[FailingHost]
    breakers: list[BreakerState]
    #: Worker processes reporting, their deliveries in flight, and the most there may be.
    engine: tuple[int, int, int]
    #: What could not be read (Redis away...), for the reader to see.
    problems: list[str] = field(default_factory=list)
    #: The worker processes by their heartbeat rows.
    processes: list[ProcessStatus] = field(default_factory=list)
    took: float = 0.0

    def totals(self) -> dict[str, int]:
        """Deliveries by state over every lane."""
        return {state: sum(lane.counts[state] for lane in self.lanes) for state in STATES}

    @property
    def finished_recently(self) -> int:
        """Deliveries that reached a final state in the last :data:`RECENT` seconds."""
        return sum(sum(counts.values()) for _, counts in self.per_minute)

    @property
    def per_second(self) -> float:
        """Deliveries finished per second over the last :data:`RECENT` seconds."""
        return round(self.finished_recently / RECENT, 2)

    @property
    def oldest_due(self) -> float | None:
        """Seconds the longest-waiting due delivery of any lane has waited."""
        ages = [lane.oldest_due for lane in self.lanes if lane.oldest_due is not None]
        return max(ages) if ages else None

    def as_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-ready data (``outbox status --json``)."""
        engine = self.engine
        return {
            "taken_at": self.taken_at.isoformat(),
            "took_seconds": round(self.took, 4),
            "lanes": {
                lane.lane: {**lane.counts, "due": lane.due, "oldest_due_seconds": lane.oldest_due}
                for lane in self.lanes
            },
            "totals": self.totals(),
            "in_flight": self.totals()[DeliveryState.SENDING],
            "oldest_due_seconds": self.oldest_due,
            "throughput": {
                "window_seconds": RECENT,
                "finished": self.finished_recently,
                "per_second": self.per_second,
                "per_minute": [
                    {"minute": minute.isoformat(), **counts} for minute, counts in self.per_minute
                ],
            },
            "send_to_settle_seconds": self.settle.as_dict() if self.settle else None,
            "attempt_seconds": self.attempt.as_dict() if self.attempt else None,
            "slowest_hosts": [vars(host) for host in self.slowest],
            "hosts": {
                "failing": self.hosts_failing,
                "unavailable": self.hosts_unavailable,
                "top": [
                    {
                        **vars(host),
                        "unavailable_since": _iso(host.unavailable_since),
                        "last_failure": _iso(host.last_failure),
                    }
                    for host in self.failing
                ],
            },
            "breakers": [
                {**vars(state), "open_until": state.open_until.isoformat()}
                for state in self.breakers
            ],
            "engine": {"processes": engine[0], "in_flight": engine[1], "capacity": engine[2]},
            "processes": [process.as_dict() for process in self.processes],
            "problems": self.problems,
        }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def lane_statuses(now: datetime) -> list[LaneStatus]:
    """Each lane's counts by state, due deliveries and oldest due age: two queries."""
    counts = {lane: dict.fromkeys(STATES, 0) for lane in LANES}
    grouped = Delivery.objects.order_by().values_list("state", "lane").annotate(n=Count("id"))
    for state, lane, n in grouped:
        counts.setdefault(lane, dict.fromkeys(STATES, 0))[state] = n
    due = (
        Delivery.objects.filter(state=DeliveryState.QUEUED, next_attempt_at__lte=now)
        .order_by()
        .values_list("lane")
        .annotate(n=Count("id"), oldest=Min("next_attempt_at"))
    )
    behind = {lane: (n, (now - oldest).total_seconds()) for lane, n, oldest in due}
    return [
        LaneStatus(lane, by_state, *behind.get(lane, (0, None)))
        for lane, by_state in counts.items()
    ]


def per_minute(now: datetime) -> list[tuple[datetime, dict[str, int]]]:
    """Deliveries finished in each of the last :data:`RECENT` seconds' minutes, by state."""
    rows = (
        Delivery.objects.filter(finished_at__gte=now - timedelta(seconds=RECENT))
        .annotate(minute=Trunc("finished_at", "minute", tzinfo=UTC))
        .order_by()
        .values_list("minute", "state")
        .annotate(n=Count("id"))
    )
    minutes: dict[datetime, dict[str, int]] = {}
    for minute, state, n in rows:
        minutes.setdefault(minute, {})[state] = n
    return sorted(minutes.items())


def settle_times(now: datetime) -> Quantiles | None:
    """Send-to-settle quantiles of the latest finished deliveries (the message's creation
    to the delivery's final state), from at most :data:`SETTLE_SAMPLE` rows."""
    rows = (
        Delivery.objects.filter(finished_at__gte=now - timedelta(seconds=RECENT))
        .order_by("-finished_at")
        .values_list("finished_at", "message__created_at")[:SETTLE_SAMPLE]
    )
    return quantiles((done - sent).total_seconds() for done, sent in rows if done and sent)


def failing_hosts(now: datetime, limit: int = 10) -> tuple[int, int, list[FailingHost]]:
    """How many hosts fail and are unavailable, and the worst ``limit`` of them."""
    hour_ago = now - timedelta(hours=1)
    recent = {
        row["host"]: (row["n"], row["last"])
        for row in failed_attempts()
        .filter(at__gte=hour_ago)
        .order_by()
        .values("host")
        .annotate(n=Count("id"), last=Max("at"))
        .order_by("-n", "host")[:limit]
    }
    rows = {host.name: host for host in Host.objects.filter(name__in=list(recent))}
    rows.update(
        (host.name, host)
        for host in Host.objects.order_by("-failure_days", "name")[:limit]
        if host.name not in rows
    )
    found = [
        FailingHost(
            name,
            row.failure_days if row else 0,
            row.unavailable_since if row else None,
            *recent.get(name, (0, None)),
        )
        for name, row in [(name, rows.get(name)) for name in {*recent, *rows}]
    ]
    found.sort(key=lambda host: (-host.failures, -host.failure_days, host.host))
    failing = Host.objects.count()
    unavailable = Host.objects.filter(unavailable_since__isnull=False).count()
    return failing, unavailable, found[:limit]


def failing_population(now: datetime) -> int:
    """How many hosts :func:`failing_hosts` picks its worst from: those with failed
    attempts in the last hour and those with a Host row (failing since a day)."""
    recent = failed_attempts().filter(at__gte=now - timedelta(hours=1)).order_by().values("host")
    return recent.union(Host.objects.order_by().values("name")).count()


def take_snapshot() -> Snapshot:
    """Read everything a snapshot holds, now."""
    began = time.perf_counter()
    now = timezone.now()
    problems: list[str] = []
    try:
        breakers = configured_store().states(limit=100)
    except BreakerStoreUnavailable as error:
        breakers = []
        problems.append(str(error))
    attempt, slowest, engine = None, [], (0, 0, 0)
    try:
        store = configured_metrics_store()
        pairs = parse_timings(store.timings())
        attempt, slowest = quantiles(seconds for _, seconds in pairs), slowest_hosts(pairs)
        engine = engine_usage(store.processes(), store.forget)
    except Exception as error:  # the metrics store is Redis: any of its errors
        problems.append(f"cannot read the workers' metrics: {error}")
    failing_count, unavailable, failing = failing_hosts(now)
    return Snapshot(
        taken_at=now,
        lanes=lane_statuses(now),
        per_minute=per_minute(now),
        settle=settle_times(now),
        attempt=attempt,
        slowest=slowest,
        hosts_failing=failing_count,
        hosts_unavailable=unavailable,
        failing=failing,
        breakers=breakers,
        engine=engine,
        problems=problems,
        processes=process_statuses(),
        took=time.perf_counter() - began,
    )


def engine_usage(reports: dict[str, str], forget: Any = None) -> tuple[int, int, int]:
    """``(processes, deliveries in flight, capacity)`` over the fresh reports; stale
    ones are passed to ``forget``."""
    processes = in_flight = capacity = 0
    stale = []
    now = time.time()
    for name, report in reports.items():
        try:
            running, most, at = (float(part) for part in report.split())
        except ValueError:
            stale.append(name)
            continue
        if now - at > REPORT_STALE:
            stale.append(name)
            continue
        processes, in_flight, capacity = (
            processes + 1,
            in_flight + int(running),
            capacity + int(most),
        )
    if stale and forget is not None:
        forget(*stale)
    return processes, in_flight, capacity


_snapshots = Fresh(take_snapshot)


def cached_snapshot(ttl: float) -> Snapshot:
    """A snapshot at most ``ttl`` seconds old, taken by at most one thread at a time."""
    return _snapshots.get(ttl)

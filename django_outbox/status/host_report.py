"""One host in detail (``outbox status --host``), and resetting hosts (``outbox hosts reset``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Min
from django.utils import timezone

from django_outbox.breakers import BreakerState, BreakerStoreUnavailable, breaker_key
from django_outbox.breakers.configured import configured_store
from django_outbox.counters.shared import configured_metrics_store
from django_outbox.destinations.availability import forget_hosts
from django_outbox.models import Attempt, Delivery, DeliveryState, Host, HostPause
from django_outbox.status.snapshot import STATES
from django_outbox.status.timings import HostTime, parse_timings, slowest_hosts
from django_outbox.upkeep.pauses import pauses_in_force

#: Attempts of the host's history shown.
HISTORY_SHOWN = 20


@dataclass(frozen=True)
class HostReport:
    """What is known about deliveries to one host."""

    host: str
    counts: dict[str, int]
    due: int
    oldest_due: float | None
    #: Its Host row while it fails (failure days, since when, unavailable since, why).
    failing: Host | None
    #: Its pause, if an operator paused it.
    pause: HostPause | None
    breaker: BreakerState | None
    #: The latest rows of its deliveries' attempt history, newest first.
    history: list[Attempt]
    #: Its attempts among the workers' recent attempts.
    recent: HostTime | None
    problems: list[str]


def host_report(host: str) -> HostReport:
    """Read :class:`HostReport` for ``host`` (a lower-case host name)."""
    host = host.lower()
    now = timezone.now()
    counts = dict.fromkeys(STATES, 0)
    rows = Delivery.objects.filter(host=host).order_by().values_list("state").annotate(Count("id"))
    counts.update(dict(rows))
    due = Delivery.objects.filter(
        host=host, state=DeliveryState.QUEUED, next_attempt_at__lte=now
    ).aggregate(n=Count("id"), oldest=Min("next_attempt_at"))
    oldest = (now - due["oldest"]).total_seconds() if due["oldest"] else None
    problems: list[str] = []
    breaker = None
    try:
        key = breaker_key(host, "", "host")
        breaker = next((state for state in configured_store().states() if state.key == key), None)
    except BreakerStoreUnavailable as error:
        problems.append(str(error))
    recent = None
    try:
        pairs = parse_timings(configured_metrics_store().timings())
        recent = next(iter(slowest_hosts([pair for pair in pairs if pair[0] == host], 1)), None)
    except Exception as error:  # the metrics store is Redis: any of its errors
        problems.append(f"cannot read the workers' metrics: {error}")
    return HostReport(
        host=host,
        counts=counts,
        due=due["n"],
        oldest_due=oldest,
        failing=Host.objects.filter(name=host).first(),
        pause=pauses_in_force().filter(name=host).first(),
        breaker=breaker,
        history=list(Attempt.objects.filter(host=host).order_by("-at")[:HISTORY_SHOWN]),
        recent=recent,
        problems=problems,
    )


def reset_hosts(names: Iterable[str]) -> tuple[int, int]:
    """Forget the failures of hosts and close their breakers: they are available again.

    Returns how many Host rows were deleted and how many breakers were reset.
    """
    names = sorted({name.lower() for name in names})
    deleted = forget_hosts(names)
    store = configured_store()
    for name in names:
        store.reset(breaker_key(name, "", "host"))
    return deleted, len(names)

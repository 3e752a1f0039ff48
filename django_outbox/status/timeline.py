"""Deliveries finished and attempts failed over time, and the batches under way.

What the admin overview draws.  Finished deliveries are counted per bucket of
``finished_at`` (the ``(finished_at, state)`` index answers it without reading
rows), failed attempts per bucket of the attempt history's ``at``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Count
from django.db.models.functions import Trunc
from django.utils import timezone

from django_outbox.models import LIVE_STATES, Delivery, Message
from django_outbox.status.snapshot import failed_attempts

#: Newest live deliveries looked at to find the batches under way.
LIVE_SAMPLE = 5000
#: Seconds an hour that has ended keeps its counts in this process.
HOURS_KEPT = 3600.0
HOUR = timedelta(hours=1)

_ended_hours: dict[datetime, tuple[Bucket, float]] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Bucket:
    """One bar: its start, deliveries finished by state, and failed attempts."""

    start: datetime
    finished: dict[str, int]
    failed_attempts: int

    @property
    def delivered(self) -> int:
        """Deliveries delivered in the bucket."""
        return self.finished.get("delivered", 0)

    @property
    def given_up(self) -> int:
        """Deliveries that failed or were refused in the bucket."""
        return self.finished.get("failed", 0) + self.finished.get("refused", 0)


def timeline(span: timedelta, unit: str, now: datetime | None = None) -> list[Bucket]:
    """Buckets of one ``unit`` (``"minute"`` or ``"hour"``) over the last ``span``.

    Hours that have ended are kept for :data:`HOURS_KEPT` seconds in this process
    (a day of them is a million rows to count on a busy server), so that a day's
    chart reads the current hour alone most of the time.
    """
    now = now or timezone.now()
    step = timedelta(minutes=1) if unit == "minute" else HOUR
    first = _floor(now - span + step, unit)
    starts: list[datetime] = []
    while first + step * len(starts) <= now:
        starts.append(first + step * len(starts))
    found: dict[datetime, Bucket] = {}
    live_from = first
    if unit == "hour":
        live_from = starts[-1]
        with _lock:
            for start in starts[:-1]:
                kept = _ended_hours.get(start)
                if kept is not None and time.monotonic() - kept[1] < HOURS_KEPT:
                    found[start] = kept[0]
        missing = [start for start in starts[:-1] if start not in found]
        if missing:
            counted = _buckets(_finished_each_hour(missing), _failed(missing[0], live_from, unit))
            with _lock:
                for start in missing:
                    found[start] = counted.get(start) or Bucket(start, {}, 0)
                    _ended_hours[start] = (found[start], time.monotonic())
                for old in [hour for hour in _ended_hours if hour < starts[0]]:
                    del _ended_hours[old]
    found.update(_buckets(_finished(live_from, unit), _failed(live_from, None, unit)))
    return [found.get(start) or Bucket(start, {}, 0) for start in starts]


def forget_ended_hours() -> None:
    """Count ended hours afresh on the next call (tests; after a large requeue)."""
    with _lock:
        _ended_hours.clear()


def _finished(since: datetime, unit: str) -> dict[datetime, dict[str, int]]:
    """Deliveries finished since ``since``, per ``unit`` and state."""
    counts: dict[datetime, dict[str, int]] = {}
    rows = (
        Delivery.objects.filter(finished_at__gte=since)
        .annotate(bucket=Trunc("finished_at", unit, tzinfo=UTC))
        .order_by()
        .values_list("bucket", "state")
        .annotate(n=Count("*"))
    )
    for bucket, state, n in rows:
        counts.setdefault(bucket, {})[state] = n
    return counts


def _finished_each_hour(hours: list[datetime]) -> dict[datetime, dict[str, int]]:
    """Deliveries finished in each of ``hours`` (hours that ended), by state: one range
    count an hour, which the ``(finished_at, state)`` index answers alone.  A day of a
    busy server is a million rows, which this counts in less than half the time that
    truncating every row's time to its hour takes on PostgreSQL (measured)."""
    counts: dict[datetime, dict[str, int]] = {}
    for start in hours:
        rows = (
            Delivery.objects.filter(finished_at__gte=start, finished_at__lt=start + HOUR)
            .order_by()
            .values_list("state")
            .annotate(n=Count("*"))
        )
        counts[start] = dict(rows)
    return counts


def _failed(since: datetime, until: datetime | None, unit: str) -> dict[datetime, int]:
    """Failed attempts from ``since`` (to ``until``) per ``unit``."""
    failed = failed_attempts().filter(at__gte=since)
    if until is not None:
        failed = failed.filter(at__lt=until)
    return dict(
        failed.annotate(bucket=Trunc("at", unit, tzinfo=UTC))
        .order_by()
        .values_list("bucket")
        .annotate(n=Count("*"))
    )


def _buckets(
    finished: dict[datetime, dict[str, int]], failures: dict[datetime, int]
) -> dict[datetime, Bucket]:
    return {
        start: Bucket(start, finished.get(start, {}), failures.get(start, 0))
        for start in {*finished, *failures}
    }


def _floor(moment: datetime, unit: str) -> datetime:
    moment = moment.astimezone(UTC).replace(second=0, microsecond=0)
    return moment.replace(minute=0) if unit == "hour" else moment


@dataclass(frozen=True)
class BatchProgress:
    """A message some of whose deliveries are still live, and how far it has got."""

    message: Message
    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Its deliveries written so far."""
        return sum(self.counts.values())

    def share(self, *states: str) -> float:
        """The percentage of its deliveries in ``states``."""
        return round(100 * sum(self.counts.get(s, 0) for s in states) / max(1, self.total), 1)


def batches_in_progress(limit: int = 10) -> list[BatchProgress]:
    """The latest messages with live deliveries (found among the newest live ones)."""
    live = (
        Delivery.objects.filter(state__in=LIVE_STATES)
        .order_by("-id")
        .values_list("message_id", flat=True)[:LIVE_SAMPLE]
    )
    ids = sorted(set(live), reverse=True)[:limit]
    counts: dict[int, dict[str, int]] = {pk: {} for pk in ids}
    rows = (
        Delivery.objects.filter(message_id__in=ids)
        .order_by()
        .values_list("message_id", "state")
        .annotate(n=Count("id"))
    )
    for pk, state, n in rows:
        counts[pk][state] = n
    messages = Message.objects.defer("body").in_bulk(ids)
    return [BatchProgress(messages[pk], counts[pk]) for pk in ids if pk in messages]

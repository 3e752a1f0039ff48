"""Deliveries finished and attempts failed over time, and the batches under way.

What the admin overview draws.  Finished deliveries are counted per bucket of
``finished_at`` (the ``(finished_at, state)`` index answers it without reading
rows), failed attempts per bucket of the attempt history's ``at``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Count
from django.db.models.functions import Trunc
from django.utils import timezone

from django_outbox.models import LIVE_STATES, Attempt, Delivery, Message

#: Newest live deliveries looked at to find the batches under way.
LIVE_SAMPLE = 5000


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
    """Buckets of one ``unit`` (``"minute"`` or ``"hour"``) over the last ``span``."""
    now = now or timezone.now()
    step = timedelta(minutes=1) if unit == "minute" else timedelta(hours=1)
    first = _floor(now - span + step, unit)
    finished: dict[datetime, dict[str, int]] = {}
    rows = (
        Delivery.objects.filter(finished_at__gte=first)
        .annotate(bucket=Trunc("finished_at", unit, tzinfo=UTC))
        .order_by()
        .values_list("bucket", "state")
        .annotate(n=Count("id"))
    )
    for bucket, state, n in rows:
        finished.setdefault(bucket, {})[state] = n
    failed: dict[datetime, int] = dict(
        Attempt.objects.filter(at__gte=first, held=False)
        .annotate(bucket=Trunc("at", unit, tzinfo=UTC))
        .order_by()
        .values_list("bucket")
        .annotate(n=Count("id"))
    )
    buckets = []
    start = first
    while start <= now:
        buckets.append(Bucket(start, finished.get(start, {}), failed.get(start, 0)))
        start += step
    return buckets


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
    messages = Message.objects.defer("body", "pending_inboxes").in_bulk(ids)
    return [BatchProgress(messages[pk], counts[pk]) for pk in ids if pk in messages]

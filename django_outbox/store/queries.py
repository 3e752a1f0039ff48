"""Reads that choose which deliveries a transition applies to.

They change nothing: :mod:`django_outbox.store.transitions` makes each change,
conditional on the state it found, so a row that moved on between the read
and the write is simply left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.db.models import Count, Exists, Min, OuterRef, Q, QuerySet
from django.utils import timezone

from django_outbox.models import LIVE_STATES, Delivery, DeliveryState, Lane

#: Rows one step of the sweeper touches at most.
STEP = 5000
#: Ids of deliveries to publish, by lane (the Celery queue).
Lanes = dict[str, list[int]]


def by_lane(rows: Iterable[tuple[int, str]]) -> Lanes:
    """``(id, lane)`` pairs grouped into ids by lane."""
    lanes: Lanes = {}
    for pk, lane in rows:
        lanes.setdefault(lane, []).append(pk)
    return lanes


def earlier_live_inboxes(ordering_key: str, inboxes: Sequence[str], message_id: int) -> set[str]:
    """Inboxes with a live delivery of an earlier message under ``ordering_key``."""
    return set(
        Delivery.objects.filter(
            ordering_key=ordering_key,
            inbox__in=inboxes,
            state__in=LIVE_STATES,
            message_id__lt=message_id,
        ).values_list("inbox", flat=True)
    )


def next_waiting(finished: Iterable[tuple[str, str]]) -> list[tuple[int, str]]:
    """``(id, lane)`` of the delivery next in line behind each ``(ordering_key, inbox)``,
    when that is a waiting one (nothing live is before it any more)."""
    found: list[tuple[int, str]] = []
    for key, inbox in set(finished):
        if not key:
            continue
        first = (
            Delivery.objects.filter(ordering_key=key, inbox=inbox, state__in=LIVE_STATES)
            .order_by("message_id")
            .values_list("id", "state", "lane")
            .first()
        )
        if first is not None and first[1] == DeliveryState.WAITING:
            found.append((first[0], first[2]))
    return found


def freed_pairs(message_id: int, ordering_key: str) -> list[tuple[str, str]]:
    """``(ordering_key, inbox)`` of a message's waiting deliveries with nothing live before."""
    earlier_live = Delivery.objects.filter(
        ordering_key=ordering_key,
        inbox=OuterRef("inbox"),
        state__in=LIVE_STATES,
        message_id__lt=message_id,
    )
    freed = Delivery.objects.filter(message_id=message_id, state=DeliveryState.WAITING).filter(
        ~Exists(earlier_live)
    )
    return [(ordering_key, inbox) for inbox in freed.values_list("inbox", flat=True)]


def stranded_pairs() -> list[tuple[str, str]]:
    """``(ordering_key, inbox)`` whose waiting deliveries have nothing queued or sending
    before them (a step's worth): left waiting by a crash between two writes."""
    earlier_live = Delivery.objects.filter(
        ordering_key=OuterRef("ordering_key"),
        inbox=OuterRef("inbox"),
        state__in=(DeliveryState.QUEUED, DeliveryState.SENDING),
    )
    stranded = (
        Delivery.objects.filter(state=DeliveryState.WAITING)
        .annotate(blocked=Exists(earlier_live))
        .filter(blocked=False)
        .values("ordering_key", "inbox")
        .annotate(first=Min("id"))[:STEP]
    )
    return [(row["ordering_key"], row["inbox"]) for row in stranded]


def not_yet_due(
    ids: Sequence[int], horizon: float, published: datetime | None = None
) -> tuple[list[int], datetime | None]:
    """Queued ids that come due within ``horizon`` seconds, and the earliest due time.

    With ``published`` (when the message asking was published), only the rows not
    dispatched again since: a row stamped later has a newer message of its own (a
    dispatch stamps its rows, then publishes them), which retries it if need be."""
    if not ids:  # a task's deliveries were all claimed: nothing to ask
        return [], None
    now = timezone.now()
    rows = Delivery.objects.filter(
        id__in=ids,
        state=DeliveryState.QUEUED,
        next_attempt_at__gt=now,
        next_attempt_at__lte=now + timedelta(seconds=horizon),
    )
    if published is not None:
        rows = rows.filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lte=published))
    found = list(rows.values_list("id", "next_attempt_at"))
    if not found:
        return [], None
    return [row[0] for row in found], min(row[1] for row in found)


def queued() -> QuerySet[Delivery]:
    """Queued deliveries, of every lane by name: so named, PostgreSQL reads them from
    ranges of the ``django_outbox_due`` index (lane, due time; queued rows only), not
    from the whole table, nor from the whole index for the due ones (see the
    large-table benchmark)."""
    return Delivery.objects.filter(state=DeliveryState.QUEUED, lane__in=Lane.values)


def due_in_lane(lane: str, limit: int) -> list[int]:
    """Ids of up to ``limit`` queued deliveries of ``lane`` that are due, longest due
    first: a range of the ``django_outbox_due`` index, which holds queued rows only."""
    return list(
        Delivery.objects.filter(
            state=DeliveryState.QUEUED, lane=lane, next_attempt_at__lte=timezone.now()
        )
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )


def expired() -> list[int]:
    """Queued and waiting deliveries whose batch deadline has passed (a step's worth)."""
    return list(
        Delivery.objects.filter(
            state__in=(DeliveryState.QUEUED, DeliveryState.WAITING),
            message__deadline__lte=timezone.now(),
        ).values_list("id", flat=True)[:STEP]
    )


def queued_per_host(hosts: Iterable[str]) -> dict[str, int]:
    """How many deliveries are queued for each of ``hosts`` (those with none are left out)."""
    rows = (
        Delivery.objects.filter(host__in=set(hosts), state=DeliveryState.QUEUED)
        .order_by()
        .values_list("host")
        .annotate(n=Count("id"))
    )
    return dict(rows)

"""Ordering keys: a delivery waits for the earlier ones to its inbox with the same key.

``send`` writes such a delivery as ``waiting``.  When the one before it
finishes (delivered, refused, skipped or given up) the next waiting one is
queued and dispatched at once.  A send whose transaction commits only after
the delivery it waited for finished looks again on commit (fanout.py); the
sweeper frees whatever is still left waiting with nothing live before it.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Exists, Min, OuterRef
from django.utils import timezone

from django_outbox.models import LIVE_STATES, Delivery, DeliveryState


def promote_successors(finished: Iterable[tuple[str, str]]) -> dict[str, list[int]]:
    """Queue the next waiting delivery of each finished ``(ordering_key, inbox)``.

    Returns the promoted ids by lane, for the caller to publish.
    """
    promoted: dict[str, list[int]] = {}
    for key, inbox in set(finished):
        if not key:
            continue
        first = (
            Delivery.objects.filter(ordering_key=key, inbox=inbox, state__in=LIVE_STATES)
            .order_by("message_id")
            .values_list("id", "state", "lane")
            .first()
        )
        if first is None or first[1] != DeliveryState.WAITING:
            continue
        if Delivery.objects.filter(id=first[0], state=DeliveryState.WAITING).update(
            state=DeliveryState.QUEUED, next_attempt_at=timezone.now(), dispatched_at=timezone.now()
        ):
            promoted.setdefault(first[2], []).append(first[0])
    return promoted


def stranded_waiting(limit: int) -> list[tuple[str, str]]:
    """``(key, inbox)`` pairs whose waiting deliveries have no live one before them."""
    earlier_live = Delivery.objects.filter(
        ordering_key=OuterRef("ordering_key"),
        inbox=OuterRef("inbox"),
        state__in=(DeliveryState.QUEUED, DeliveryState.SENDING),
    )
    rows = (
        Delivery.objects.filter(state=DeliveryState.WAITING)
        .annotate(blocked=Exists(earlier_live))
        .filter(blocked=False)
        .values("ordering_key", "inbox")
        .annotate(first=Min("id"))[:limit]
    )
    return [(row["ordering_key"], row["inbox"]) for row in rows]

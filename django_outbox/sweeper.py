"""The periodic pass that keeps the database and the broker in step.

Each pass, in bounded steps: fails live deliveries whose batch deadline has
passed; reclaims deliveries whose lease lapsed (their worker died), failing
those that have spent every attempt; dispatches deliveries that are due and
have no Celery message (parked retries, a broker that was down or flushed);
re-runs large fan-outs whose expansion was lost; frees ordered deliveries
left waiting; and prunes finished rows past the retention period.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.dispatch import mark_and_publish, publish
from django_outbox.models import FINAL_STATES, Delivery, DeliveryState, Message, locked
from django_outbox.ordering import promote_successors, stranded_waiting
from django_outbox.recorder import give_up_rows

logger = logging.getLogger("django_outbox.sweeper")

STEP = 5000


def fail_expired() -> int:
    """Give up on queued and waiting deliveries whose batch deadline has passed."""
    ids = list(
        Delivery.objects.filter(
            state__in=(DeliveryState.QUEUED, DeliveryState.WAITING),
            message__deadline__lte=timezone.now(),
        ).values_list("id", flat=True)[:STEP]
    )
    return give_up_rows(ids, "the batch's deadline passed before it was sent", deadline=True)


def reclaim_lapsed() -> int:
    """Queue again, or fail, deliveries whose worker's lease ran out."""
    now = timezone.now()
    lapsed = Delivery.objects.filter(state=DeliveryState.SENDING, lease_until__lt=now)
    spent = list(
        lapsed.filter(attempts__gte=F("message__max_attempts")).values_list("id", flat=True)[:STEP]
    )
    failed = give_up_rows(spent, "the worker was lost during every attempt") if spent else 0
    by_lane: dict[str, list[int]] = {}
    with transaction.atomic():
        rows = list(
            locked(lapsed.filter(attempts__lt=F("message__max_attempts"))).values_list(
                "id", "lane"
            )[:STEP]
        )
        Delivery.objects.filter(id__in=[r[0] for r in rows], state=DeliveryState.SENDING).update(
            state=DeliveryState.QUEUED,
            claimed_by="",
            lease_until=None,
            next_attempt_at=now,
            last_error="the worker's lease lapsed before it reported back",
        )
    for delivery_id, lane in rows:
        by_lane.setdefault(lane, []).append(delivery_id)
    if by_lane:
        mark_and_publish(by_lane)
    return failed + len(rows)


def dispatch_due() -> int:
    """Publish due deliveries that have no Celery message, or whose message was lost."""
    now = timezone.now()
    lost = now - timedelta(seconds=conf.REDISPATCH_AFTER)
    by_lane: dict[str, list[int]] = {}
    with transaction.atomic():
        rows = list(
            locked(
                Delivery.objects.filter(state=DeliveryState.QUEUED, next_attempt_at__lte=now)
                .filter(Q(dispatched_at__isnull=True) | Q(dispatched_at__lt=lost))
                .order_by("next_attempt_at")
            ).values_list("id", "lane")[:STEP]
        )
        Delivery.objects.filter(id__in=[r[0] for r in rows]).update(dispatched_at=now)
    for delivery_id, lane in rows:
        by_lane.setdefault(lane, []).append(delivery_id)
    if by_lane:
        publish(by_lane)
    return len(rows)


def expand_lost() -> int:
    """Run again the expansion of large fan-outs whose task was lost."""
    from django_outbox.tasks import expand

    cutoff = timezone.now() - timedelta(seconds=conf.REDISPATCH_AFTER)
    stuck = list(
        Message.objects.exclude(pending_inboxes="")
        .filter(created_at__lt=cutoff)
        .values_list("id", "lane")[:100]
    )
    for message_id, lane in stuck:
        expand.apply_async((message_id,), queue=lane)
    return len(stuck)


def free_waiting() -> int:
    """Queue ordered deliveries left waiting although nothing is before them."""
    promoted = promote_successors(stranded_waiting(STEP))
    if promoted:
        publish(promoted)
    return sum(len(ids) for ids in promoted.values())


def prune() -> int:
    """Delete finished deliveries, and then messages, older than the retention period."""
    cutoff = timezone.now() - timedelta(seconds=conf.RETENTION_SECONDS)
    ids = list(
        Delivery.objects.filter(state__in=FINAL_STATES, finished_at__lt=cutoff).values_list(
            "id", flat=True
        )[:STEP]
    )
    deleted, _ = Delivery.objects.filter(id__in=ids).delete()
    Message.objects.filter(created_at__lt=cutoff, pending_inboxes="", deliveries=None).delete()
    return deleted


def sweep() -> dict[str, int]:
    """One full pass; returns how many rows each step touched."""
    counts = {
        "expired": fail_expired(),
        "reclaimed": reclaim_lapsed(),
        "dispatched": dispatch_due(),
        "expanded": expand_lost(),
        "freed": free_waiting(),
        "pruned": prune(),
    }
    if any(counts.values()):
        logger.info("sweep: %s", counts)
    return counts

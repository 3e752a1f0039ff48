"""Publishing delivery ids to Celery: the only place that talks to the broker.

A Celery message carries up to ``OUTBOX_CHUNK_SIZE`` delivery ids of one lane.
A whole dispatch shares one producer connection, so a fan-out of thousands
costs a few dozen publishes, not thousands of connections.  When the broker
cannot be reached the rows are marked undispatched and the sweeper sends them
once it can: the database, not the broker, is what must not lose them.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.models import Delivery

logger = logging.getLogger("django_outbox.dispatch")


def chunked(ids: Sequence[int], size: int) -> Iterable[list[int]]:
    """``ids`` in lists of at most ``size``."""
    for start in range(0, len(ids), max(1, size)):
        yield list(ids[start : start + size])


def publish(lanes: dict[str, list[int]], countdown: float | None = None) -> bool:
    """Send ``deliver`` messages for the ids of each lane; False if the broker failed.

    On failure the rows are marked undispatched, so that the sweeper picks
    them up on its next pass rather than after ``OUTBOX_REDISPATCH_AFTER``.
    """
    from django_outbox.tasks import deliver

    size = conf.CHUNK_SIZE
    sent: list[int] = []
    try:
        with deliver.app.producer_or_acquire() as producer:
            for lane, ids in lanes.items():
                for chunk in chunked(ids, size):
                    options: dict[str, Any] = {"countdown": countdown} if countdown else {}
                    deliver.apply_async((chunk,), queue=lane, producer=producer, **options)
                    sent.extend(chunk)
    except Exception:
        published = set(sent)
        unsent = [i for ids in lanes.values() for i in ids if i not in published]
        logger.warning(
            "could not publish %d deliveries; the sweeper will send them",
            len(unsent),
            exc_info=True,
        )
        Delivery.objects.filter(id__in=unsent, dispatched_at__isnull=False).update(
            dispatched_at=None
        )
        return False
    return True


def publish_rows(rows: Iterable[tuple[int, str]], countdown: float | None = None) -> bool:
    """:func:`publish` for ``(id, lane)`` pairs."""
    lanes: dict[str, list[int]] = defaultdict(list)
    for delivery_id, lane in rows:
        lanes[lane].append(delivery_id)
    return publish(dict(lanes), countdown)


def mark_and_publish(ids_by_lane: dict[str, list[int]], countdown: float | None = None) -> bool:
    """Record that the rows are dispatched now, then publish them."""
    ids = [i for lane_ids in ids_by_lane.values() for i in lane_ids]
    Delivery.objects.filter(id__in=ids).update(dispatched_at=timezone.now())
    return publish(ids_by_lane, countdown)

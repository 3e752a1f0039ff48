"""The public entry points: :data:`outbox` and its methods.

``outbox.send`` checks everything first and raises a typed error writing
nothing; then it writes the rows in the caller's transaction and hands them
to Celery only once that transaction commits.  A rolled-back view sends
nothing; a committed one is never lost, because the sweeper dispatches
whatever the broker did not get.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from django_outbox.batch import Batch
from django_outbox.conf import conf
from django_outbox.exceptions import UnknownSender
from django_outbox.fanout import choose_lane, create_deliveries
from django_outbox.models import FINAL_STATES, LIVE_STATES, Delivery, DeliveryState, Message
from django_outbox.portable import PortableInbox
from django_outbox.validation import activity_type, actor_id, clean_inboxes, serialise_activity

logger = logging.getLogger("django_outbox.api")


class Outbox:
    """Queues activities for delivery and manages deliveries already queued."""

    def send(
        self,
        actor: object,
        activity: Mapping[str, Any],
        inboxes: Iterable[str],
        *,
        batch: Batch | None = None,
        content_type: str = "application/activity+json",
    ) -> Message | None:
        """Queue ``activity``, signed as ``actor``, for each inbox once.

        Runs inside the caller's transaction: nothing is published to Celery
        until it commits.  Returns the stored message, or ``None`` when
        ``inboxes`` is empty.  Raises a subclass of
        :class:`~django_outbox.exceptions.InvalidSend` for bad input, having
        written nothing.
        """
        targets = clean_inboxes(inboxes)
        return self._queue(actor, activity, targets, {}, batch, content_type)

    def send_portable(
        self,
        actor: object,
        activity: Mapping[str, Any],
        inboxes: Iterable[PortableInbox],
        *,
        batch: Batch | None = None,
        content_type: str = "application/activity+json",
    ) -> Message | None:
        """:meth:`send` to FEP-ef61 portable inboxes, each through its gateways in order."""
        via: dict[str, list[str]] = {}
        for portable in inboxes:
            via.setdefault(portable.inbox, portable.targets())
        return self._queue(actor, activity, list(via), via, batch, content_type)

    def _queue(
        self,
        actor: object,
        activity: Mapping[str, Any],
        targets: list[str],
        via: dict[str, list[str]],
        batch: Batch | None,
        content_type: str,
    ) -> Message | None:
        batch = batch or Batch()
        sender = actor_id(actor)
        body = serialise_activity(activity, conf.MAX_BODY_BYTES)
        if conf.KEY_RESOLVER(sender) is None:
            raise UnknownSender(f"the key resolver has no key for {sender!r}")
        if not targets:
            return None
        max_attempts = min(batch.max_attempts or conf.MAX_ATTEMPTS, conf.MAX_ATTEMPTS)
        inline = via or len(targets) <= conf.INLINE_FANOUT
        with transaction.atomic():
            message = Message.objects.create(
                sender=sender,
                body=body,
                body_sha256=hashlib.sha256(body).digest(),
                content_type=content_type,
                activity_type=activity_type(activity),
                tag=batch.tag or "",
                deadline=batch.deadline,
                ordering_key=batch.ordering_key or "",
                lane=choose_lane(len(targets), batch.low_priority),
                synchronize_collection=batch.synchronize_collection,
                max_attempts=max_attempts,
                inbox_count=len(targets),
                pending_inboxes="" if inline else "\n".join(targets),
            )
            if inline:
                ids = create_deliveries(message, targets, via)
                _publish_on_commit(ids)
            else:
                _expand_on_commit(message.pk, message.lane)
        return message

    def requeue(self, deliveries: QuerySet[Delivery]) -> int:
        """Queue the given finished deliveries again, with a fresh attempt budget.

        Live deliveries are left alone.  One with an ordering key waits again
        if an earlier delivery with that key to its inbox is still live.
        Returns how many were requeued.
        """
        now = timezone.now()
        rows = list(
            deliveries.filter(state__in=FINAL_STATES).values_list(
                "id", "lane", "ordering_key", "inbox", "message_id"
            )
        )
        behind = {
            row[0]
            for row in rows
            if row[2]
            and Delivery.objects.filter(
                ordering_key=row[2], inbox=row[3], state__in=LIVE_STATES, message_id__lt=row[4]
            ).exists()
        }
        fresh = {
            "attempts": 0,
            "next_attempt_at": now,
            "deadline_reached": False,
            "finished_at": None,
            "claimed_by": "",
            "lease_until": None,
        }
        ids = [row[0] for row in rows]
        final = Delivery.objects.filter(state__in=FINAL_STATES)
        final.filter(id__in=behind).update(state=DeliveryState.WAITING, dispatched_at=None, **fresh)
        final.filter(id__in=ids).exclude(id__in=behind).update(
            state=DeliveryState.QUEUED, dispatched_at=now, **fresh
        )
        by_lane: dict[str, list[int]] = {}
        for delivery_id, lane, *_ in rows:
            if delivery_id not in behind:
                by_lane.setdefault(lane, []).append(delivery_id)
        _publish_on_commit(by_lane)
        return len(ids)

    def give_up(self, deliveries: QuerySet[Delivery], reason: str = "given up by hand") -> int:
        """Mark the given live deliveries failed now; returns how many changed.

        ``delivery_failed`` is sent for each, as for any other failure.
        """
        from django_outbox.recorder import give_up_rows

        ids = list(deliveries.filter(state__in=LIVE_STATES).values_list("id", flat=True))
        return give_up_rows(ids, reason)


def _publish_on_commit(ids: dict[str, list[int]]) -> None:
    """Publish ``ids`` once the current transaction commits."""

    def publish_deliveries() -> None:
        from django_outbox.dispatch import publish

        publish(ids)

    transaction.on_commit(publish_deliveries, robust=True)


def _expand_on_commit(message_id: int, lane: str) -> None:
    """Start the expansion of a large fan-out once the current transaction commits.

    If the broker is down the message keeps its inbox list, and the sweeper
    starts the expansion after ``OUTBOX_REDISPATCH_AFTER``.
    """

    def start_expansion() -> None:
        from django_outbox.tasks import expand

        try:
            expand.apply_async((message_id,), queue=lane)
        except Exception:
            logger.warning(
                "could not publish the expansion of message %s; the sweeper will",
                message_id,
                exc_info=True,
            )

    transaction.on_commit(start_expansion, robust=True)


outbox = Outbox()

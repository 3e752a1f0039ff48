"""The public entry points: :data:`outbox` and its methods.

``outbox.send`` checks everything first and raises a typed error writing
nothing (whatever a worker would fail on for every attempt is refused here:
see ``docs/security.md``); then it writes the rows in the caller's transaction
and hands them to Celery only once that transaction commits.  A rolled-back view sends
nothing; a committed one is never lost, because the sweeper dispatches
whatever the broker did not get.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from django_outbox.batch import Batch
from django_outbox.conf import conf
from django_outbox.dispatch import start_expansion_on_commit
from django_outbox.exceptions import InvalidBatch, InvalidInbox
from django_outbox.fanout import choose_lane, store_pending, write_deliveries
from django_outbox.models import Delivery, Message
from django_outbox.operations import give_up, requeue
from django_outbox.portable import PortableInbox
from django_outbox.validation import (
    activity_type,
    actor_id,
    check_content_type,
    check_inbox_count,
    check_sender_key,
    clean_inboxes,
    serialise_activity,
)


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
        written nothing: an inbox the transport would read otherwise than it is
        stored, more than ``OUTBOX_MAX_INBOXES`` inboxes, a value too long for
        its column, a content type or key a worker could not send with.  Inboxes
        are stored in canonical form (``HTTPS://Example.com:443/a`` as
        ``https://example.com/a``).
        """
        targets = clean_inboxes(inboxes, conf.MAX_INBOXES)
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
        if isinstance(inboxes, str | bytes | bytearray):
            raise InvalidInbox("inboxes must be a list of PortableInbox, not a single string")
        try:
            items = iter(inboxes)
        except TypeError:
            raise InvalidInbox(
                f"inboxes must be an iterable of PortableInbox, not {type(inboxes).__name__}"
            ) from None
        via: dict[str, list[str]] = {}
        for portable in items:
            if not isinstance(portable, PortableInbox):
                raise InvalidInbox(f"{type(portable).__name__} is not a PortableInbox")
            if portable.inbox not in via:
                via[portable.inbox] = portable.targets()
                check_inbox_count(len(via), conf.MAX_INBOXES)
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
        if batch is None:
            batch = Batch()
        elif not isinstance(batch, Batch):
            raise InvalidBatch(f"batch must be a Batch, not {type(batch).__name__}")
        sender = actor_id(actor)
        body = serialise_activity(activity, conf.MAX_BODY_BYTES)
        kind = activity_type(activity)
        content_type = check_content_type(content_type)
        check_sender_key(sender, conf.KEY_RESOLVER(sender))
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
                activity_type=kind,
                tag=batch.tag or "",
                deadline=batch.deadline,
                ordering_key=batch.ordering_key or "",
                lane=choose_lane(len(targets), batch.low_priority),
                synchronize_collection=batch.synchronize_collection,
                max_attempts=max_attempts,
                inbox_count=len(targets),
            )
            if inline:
                write_deliveries(message, targets, via)
            else:
                store_pending(message, targets)
                start_expansion_on_commit(message.pk, message.lane)
        return message

    def requeue(self, deliveries: QuerySet[Delivery]) -> int:
        """Queue the given finished deliveries again, with a fresh attempt budget.

        Live deliveries are left alone.  One with an ordering key waits again
        if an earlier delivery with that key to its inbox is still live.  They
        are published once the caller's transaction commits.  Returns how many
        were requeued.
        """
        return requeue(deliveries.values_list("id", flat=True))

    def give_up(self, deliveries: QuerySet[Delivery], reason: str = "given up by hand") -> int:
        """Mark the given live deliveries failed now; returns how many changed.

        ``delivery_failed`` is sent for each, as for any other failure.
        """
        return give_up(deliveries.values_list("id", flat=True), reason)


outbox = Outbox()

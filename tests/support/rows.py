"""Messages and deliveries written straight to the tables, in whatever state a test needs.

The package writes delivery state only through ``store/transitions.py``; tests
set the scene directly, so that each step is tested from the rows it would
find (a lapsed lease, a parked retry, a message whose expansion was lost).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from hashlib import sha256
from typing import Any

from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState, Lane, Message
from django_outbox.sending.fanout import store_pending
from django_outbox.values.claimed import ClaimedRow, MessageData
from testproject.demo.keys import ACTOR

_numbers = itertools.count(1)


def ago(seconds: float) -> datetime:
    """The time ``seconds`` ago."""
    return timezone.now() - timedelta(seconds=seconds)


def hence(seconds: float) -> datetime:
    """The time ``seconds`` from now."""
    return timezone.now() + timedelta(seconds=seconds)


def message(pending_inboxes: str = "", **fields: Any) -> Message:
    """A stored message from the demo actor; ``fields`` override the defaults.

    ``pending_inboxes`` (one URL a line) are stored as a large fan-out's are, in
    slices its expansion has not written yet.
    """
    body = b'{"type":"Create"}'
    values: dict[str, Any] = {
        "sender": ACTOR,
        "body": body,
        "body_sha256": sha256(body).digest(),
        "activity_type": "Create",
        "max_attempts": 16,
        "lane": Lane.DEFAULT,
        **fields,
    }
    stored = Message.objects.create(**values)
    if pending_inboxes:
        store_pending(stored, pending_inboxes.split("\n"))
    return stored


def delivery(parent: Message, state: str = DeliveryState.QUEUED, **fields: Any) -> Delivery:
    """A delivery of ``parent`` in ``state`` (to a new inbox unless ``inbox`` is given)."""
    inbox = fields.pop("inbox", f"https://host{next(_numbers)}.example/inbox")
    values: dict[str, Any] = {
        "inbox": inbox,
        "host": inbox.split("/")[2].split(":")[0],
        "lane": parent.lane,
        "ordering_key": parent.ordering_key,
        **fields,
    }
    return Delivery.objects.create(message=parent, state=state, **values)


def claimed_row(row: Delivery, token: str = "") -> ClaimedRow:
    """``row`` as a claim returns it."""
    return ClaimedRow(
        row.pk,
        row.message_id,
        row.inbox,
        row.host,
        row.via,
        row.lane,
        row.ordering_key,
        row.attempts,
        token or row.claimed_by,
    )


def message_data(parent: Message) -> MessageData:
    """``parent`` as a worker loads it to send."""
    return MessageData(
        parent.pk,
        parent.sender,
        bytes(parent.body),
        bytes(parent.body_sha256),
        parent.content_type,
        parent.deadline,
        parent.activity_type,
        parent.synchronize_collection,
        parent.max_attempts,
    )

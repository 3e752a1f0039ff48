"""Delivery rows written in one statement on PostgreSQL equal those ``bulk_create`` writes."""

from __future__ import annotations

from typing import Any

import pytest
from django.forms.models import model_to_dict
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState, Lane, Message
from django_outbox.store.transitions import create_deliveries

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

INBOXES = [f"https://host{n}.example/users/{n}/inbox" for n in range(5)]
VIA = {INBOXES[1]: ["https://gateway.example/inbox", "https://other.example/inbox"]}


def _message(key: str = "") -> Message:
    return Message.objects.create(
        sender="https://demo.example/users/alice",
        body=b"{}",
        body_sha256=b"\0" * 32,
        lane=Lane.DEFAULT,
        ordering_key=key,
        max_attempts=5,
    )


def _rows(message: Message) -> dict[str, dict[str, Any]]:
    """Each row of ``message`` by inbox, without what differs between two messages."""
    rows = {}
    for row in Delivery.objects.filter(message=message):
        fields = model_to_dict(row)
        for name in ("id", "message", "next_attempt_at", "dispatched_at", "created_at"):
            fields.pop(name)
        fields["dispatched"] = row.dispatched_at is not None
        rows[row.inbox] = fields
    return rows


def test_rows_equal_those_of_bulk_create() -> None:
    fast = _message()
    ids, _ = create_deliveries(fast, INBOXES, VIA)
    slow = _message()
    now = timezone.now()
    Delivery.objects.bulk_create(
        Delivery(
            message=slow,
            inbox=inbox,
            host=(VIA[inbox][0] if inbox in VIA else inbox).split("/")[2],
            via=VIA.get(inbox, []),
            lane=slow.lane,
            next_attempt_at=now,
            dispatched_at=now,
            created_at=now,
        )
        for inbox in INBOXES
    )
    assert _rows(fast) == _rows(slow)
    assert sorted(pk for pk, _ in ids) == sorted(
        Delivery.objects.filter(message=fast).values_list("id", flat=True)
    )
    assert _rows(fast)[INBOXES[1]]["host"] == "gateway.example"


def test_rows_that_wait_for_an_earlier_send_are_written_waiting_and_not_returned() -> None:
    first = _message("thread-1")
    create_deliveries(first, INBOXES[:2])
    second = _message("thread-1")
    ids, waiting_any = create_deliveries(second, INBOXES)
    assert waiting_any
    rows = Delivery.objects.filter(message=second)
    waiting = rows.filter(state=DeliveryState.WAITING)
    assert sorted(waiting.values_list("inbox", flat=True)) == sorted(INBOXES[:2])
    assert all(row.dispatched_at is None for row in waiting)
    queued = rows.filter(state=DeliveryState.QUEUED).values_list("id", flat=True)
    assert sorted(pk for pk, _ in ids) == sorted(queued)

"""outbox.send: validation before writing, rows in the caller's transaction, lanes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import transaction
from django.test import override_settings

from django_outbox import Batch, outbox
from django_outbox.exceptions import (
    BodyTooLarge,
    InvalidActivity,
    InvalidBatch,
    InvalidInbox,
    InvalidSend,
    OutboxError,
    UnknownSender,
)
from django_outbox.models import Delivery, DeliveryState, Lane, Message
from testproject.demo.keys import ACTOR
from tests.support.sends import ACTIVITY, inboxes


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"inboxes": ["ftp://a.example/inbox"]}, InvalidInbox),
        ({"inboxes": ["/inbox"]}, InvalidInbox),
        ({"inboxes": ["https://user:pw@a.example/inbox"]}, InvalidInbox),
        ({"inboxes": ["https://a.example/inbox#frag"]}, InvalidInbox),
        ({"inboxes": ["https://a.example:99999/inbox"]}, InvalidInbox),
        ({"inboxes": [42]}, InvalidInbox),
        ({"inboxes": "https://a.example/inbox"}, InvalidInbox),
        ({"activity": ["not", "an", "object"]}, InvalidActivity),
        ({"activity": {"type": "Note", "when": datetime.now(UTC)}}, InvalidActivity),
        ({"activity": {"type": "Note", "n": float("nan")}}, InvalidActivity),
        ({"activity": {"type": "Note", "content": "x" * 2_000_000}}, BodyTooLarge),
        ({"actor": "https://demo.example/users/nobody"}, UnknownSender),
        ({"actor": "https://elsewhere.example/users/bob"}, UnknownSender),
        ({"actor": object()}, UnknownSender),
    ],
)
def test_bad_input_raises_a_typed_error_and_writes_nothing(
    kwargs: dict[str, object], error: type[Exception]
) -> None:
    call = {"actor": ACTOR, "activity": ACTIVITY, "inboxes": ["https://ok.example/inbox"]}
    call.update(kwargs)
    with pytest.raises(error) as raised:
        outbox.send(call["actor"], call["activity"], call["inboxes"])  # type: ignore[arg-type]
    assert isinstance(raised.value, InvalidSend)
    assert isinstance(raised.value, OutboxError)
    assert isinstance(raised.value, ValueError)
    assert Message.objects.count() == 0
    assert Delivery.objects.count() == 0


def test_bad_batch_options_are_refused() -> None:
    with pytest.raises(InvalidBatch):
        Batch(deadline=datetime(2030, 1, 1))  # naive
    with pytest.raises(InvalidBatch):
        Batch(max_attempts=0)
    with pytest.raises(InvalidBatch):
        Batch(tag="t" * 201)


@pytest.mark.django_db
def test_size_limit_is_a_setting() -> None:
    with override_settings(OUTBOX_MAX_BODY_BYTES=50), pytest.raises(BodyTooLarge):
        outbox.send(ACTOR, {"type": "Note", "content": "x" * 60}, inboxes(1))
    assert Message.objects.count() == 0


@pytest.mark.django_db
def test_empty_inbox_list_is_a_no_op() -> None:
    assert outbox.send(ACTOR, ACTIVITY, []) is None
    assert Message.objects.count() == 0


@pytest.mark.django_db
def test_body_is_stored_once_and_inboxes_are_deduplicated(
    django_capture_on_commit_callbacks,
) -> None:  # type: ignore[no-untyped-def]
    targets = inboxes(7) + inboxes(3)
    with django_capture_on_commit_callbacks() as callbacks:
        message = outbox.send(ACTOR, ACTIVITY, targets, batch=Batch(tag="move-42"))
    assert message is not None
    assert (
        bytes(message.body)
        == b'{"@context":"https://www.w3.org/ns/activitystreams","type":"Create","id":"x"}'
    )
    assert message.inbox_count == 7 and message.tag == "move-42"
    assert message.activity_type == "Create"
    rows = Delivery.objects.filter(message=message)
    assert sorted(rows.values_list("inbox", flat=True)) == sorted(inboxes(7))
    assert set(rows.values_list("state", flat=True)) == {DeliveryState.QUEUED}
    assert len(callbacks) == 2  # publishing, and counting its fan-out, wait for the commit


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("count", "low", "setting", "lane"),
    [
        (1, False, False, Lane.PRIORITY),
        (5, False, False, Lane.PRIORITY),
        (6, False, False, Lane.DEFAULT),
        (6, True, False, Lane.DEFAULT),
        (6, True, True, Lane.LOW),
        (2, True, True, Lane.LOW),
    ],
)
def test_lanes(count: int, low: bool, setting: bool, lane: str) -> None:
    with override_settings(OUTBOX_LOW_LANE=setting):
        message = outbox.send(ACTOR, ACTIVITY, inboxes(count), batch=Batch(low_priority=low))
    assert message is not None and message.lane == lane
    assert set(Delivery.objects.values_list("lane", flat=True)) == {lane}


@pytest.mark.django_db(transaction=True)
def test_rolled_back_send_writes_and_publishes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    published: list[object] = []
    monkeypatch.setattr("django_outbox.broker.publish.publish", lambda *a, **k: published.append(a))

    class Boom(Exception):
        pass

    def view() -> None:
        with transaction.atomic():
            outbox.send(ACTOR, ACTIVITY, inboxes(3))
            raise Boom

    with pytest.raises(Boom):
        view()
    assert Message.objects.count() == 0
    assert published == []


@pytest.mark.django_db
def test_large_fan_out_is_expanded_by_a_worker(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    from django_outbox.sending.fanout import expand

    with override_settings(OUTBOX_INLINE_FANOUT=10):
        with django_capture_on_commit_callbacks() as callbacks:
            message = outbox.send(ACTOR, ACTIVITY, inboxes(25), batch=Batch(max_attempts=3))
        assert message is not None
        assert Delivery.objects.count() == 0 and len(callbacks) == 2  # expansion and fan-out
        assert expand(message.pk) == 25
        assert expand(message.pk) == 0  # idempotent
    assert Delivery.objects.filter(message=message).count() == 25
    message.refresh_from_db()
    assert not message.pending.exists() and message.max_attempts == 3


@pytest.mark.django_db
def test_an_aware_deadline_in_any_zone_is_kept_as_that_instant() -> None:
    summer_paris = timezone(timedelta(hours=2))
    deadline = datetime(2030, 6, 1, 12, 0, tzinfo=summer_paris)
    message = outbox.send(ACTOR, ACTIVITY, inboxes(1), batch=Batch(deadline=deadline))
    assert message is not None
    message.refresh_from_db()
    assert message.deadline == datetime(2030, 6, 1, 10, 0, tzinfo=UTC)

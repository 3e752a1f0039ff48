"""django_outbox.testing, delivering: the worker's code in the test's thread, to fake inboxes."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_outbox import PortableInbox, outbox
from django_outbox.broker.publish import DELIVER
from django_outbox.models import Delivery, DeliveryState
from django_outbox.sending.batch import Batch
from django_outbox.sending.keys import SenderKey
from django_outbox.signals import delivery_attempted, delivery_failed, delivery_settled
from django_outbox.testing import (
    Answer,
    DeliveryLoop,
    FakeInbox,
    InboxRequest,
    OutboxCapture,
    captured_sends,
    verify_signature,
)
from django_outbox.transport import ConnectFailed
from testproject.demo.keys import ACTOR, ED_ACTOR, resolve
from tests.support.receivers import ACTIVITY, receiving, unreachable_broker
from tests.support.sends import inboxes
from tests.support.verifiers import verify_cavage, verify_rfc9421

pytestmark = pytest.mark.django_db


@pytest.fixture
def send(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> Iterator[Callable[..., OutboxCapture]]:
    """``send(inboxes, **options)``: a committed ``outbox.send`` of ACTIVITY, captured."""
    with captured_sends() as capture:

        def sending(targets: list[str], actor: str = ACTOR, **options: Any) -> OutboxCapture:
            with django_capture_on_commit_callbacks(execute=True):
                outbox.send(actor, options.pop("activity", ACTIVITY), targets, **options)
            return capture

        yield sending


def key(actor: str) -> SenderKey:
    found = resolve(actor)
    assert found is not None
    return found


def rows(sent: OutboxCapture) -> list[Delivery]:
    return list(Delivery.objects.filter(message__in=[s.message for s in sent]).order_by("id"))


def test_delivers_signed_requests_as_a_worker_would(send: Callable[..., OutboxCapture]) -> None:
    targets = inboxes(3, "signed")
    sent = send(targets)
    with receiving(delivery_attempted) as attempted, receiving(delivery_settled) as settled:
        delivered = sent.deliver_all()
    requests = sent.inbox.requests
    assert [r.url for r in requests] == targets
    assert all(r.method == "POST" and r.json() == ACTIVITY for r in requests)
    pem = key(ACTOR).private_key_pem
    assert all(verify_cavage(r, pem) for r in requests)  # httpsig, not our code
    assert all(verify_signature(r, key(ACTOR)) for r in requests)
    assert requests[0].headers["content-length"] == str(len(requests[0].body))
    assert [(d.state, d.attempts, d.last_status) for d in delivered] == [("delivered", 1, 202)] * 3
    assert [kw["outcome"] for kw in attempted] == ["delivered"] * 3
    assert [(kw["inbox"], kw["status"], kw["actor"]) for kw in settled] == [
        (inbox, 202, ACTOR) for inbox in targets
    ]


def test_double_knocking_to_rfc9421(send: Callable[..., OutboxCapture]) -> None:
    inbox = FakeInbox()

    def rfc9421_only(request: InboxRequest) -> Answer:
        inbox(request)
        return 202 if "Signature-Input" in request.headers else 401

    target = inboxes(1, "knock")[0]
    send([target], actor=ED_ACTOR).deliver_all(rfc9421_only)
    first, second = inbox.requests
    ed_key = key(ED_ACTOR)
    assert "Signature-Input" not in first.headers
    assert verify_rfc9421(second, target, ed_key.private_key_pem, ed_key.key_id)  # the library
    assert verify_signature(second, ed_key)
    assert Delivery.objects.get().state == DeliveryState.DELIVERED


def test_a_failing_inbox_leaves_the_delivery_queued_for_its_retry(
    send: Callable[..., OutboxCapture],
) -> None:
    sent = send(inboxes(1, "retry"))
    inbox = FakeInbox(500, 202)
    with receiving(delivery_settled) as settled:
        [row] = sent.deliver_all(inbox)
    assert (row.state, row.attempts, row.last_status) == ("queued", 1, 500)
    assert row.next_attempt_at > timezone.now()
    assert settled == []
    retry = sent.tasks[-1]
    assert (retry.name, retry.args) == (DELIVER, ([row.pk],))
    assert retry.countdown is not None and retry.countdown > 0
    sent.deliver_all(inbox)  # not due yet: nothing is sent
    assert len(inbox.requests) == 1
    [row] = sent.deliver_all(inbox, retry_now=True)
    assert (row.state, row.attempts, row.last_status) == ("delivered", 2, 202)


@override_settings(OUTBOX_BREAKER_THRESHOLD=0)
def test_retrying_now_until_the_attempts_run_out(send: Callable[..., OutboxCapture]) -> None:
    sent = send(inboxes(1, "give-up"), batch=Batch(max_attempts=3))
    inbox = FakeInbox(503)
    with receiving(delivery_failed) as failed:
        [row] = sent.deliver_all(inbox, retry_now=True)
    assert len(inbox.requests) == 3
    assert (row.state, row.attempts) == ("failed", 3)
    assert [(kw["status"], kw["deadline"]) for kw in failed] == [(503, False)]


@override_settings(OUTBOX_BREAKER_THRESHOLD=2)
def test_retrying_now_stops_when_the_breaker_opens(send: Callable[..., OutboxCapture]) -> None:
    sent = send(inboxes(1, "breaker"))
    inbox = FakeInbox(500)
    [row] = sent.deliver_all(inbox, retry_now=True)
    assert len(inbox.requests) == 2
    assert (row.state, row.attempts) == ("queued", 2)
    assert row.last_error.startswith("held")


def test_each_inbox_its_own_answer(send: Callable[..., OutboxCapture]) -> None:
    gone, slow, fine = inboxes(3, "routes")
    sent = send([gone, slow, fine])

    def unreachable(request: InboxRequest) -> Answer:
        raise ConnectFailed("connection refused")

    with receiving(delivery_failed) as failed:
        result = sent.deliver_all(inboxes={gone: FakeInbox(410), slow: unreachable})
    states = {row.inbox: (row.state, row.last_status) for row in result}
    assert states == {gone: ("refused", 410), slow: ("queued", None), fine: ("delivered", 202)}
    assert "connection refused" in Delivery.objects.get(inbox=slow).last_error
    assert [kw["inbox"] for kw in failed] == [gone]
    assert sent.inbox.urls == [fine]


def test_an_inbox_that_raises_stops_delivery_and_keeps_the_rows_consistent(
    send: Callable[..., OutboxCapture],
) -> None:
    first, broken, third = inboxes(3, "raises")
    sent = send([first, broken, third])

    def bug(request: InboxRequest) -> Answer:
        raise RuntimeError("bug in the test's inbox")

    with pytest.raises(RuntimeError, match="bug in the test's inbox"):
        sent.deliver_all(inboxes={broken: bug})
    states = {row.inbox: (row.state, row.attempts) for row in rows(sent)}
    assert states == {first: ("delivered", 1), broken: ("queued", 0), third: ("queued", 0)}


def test_successors_with_an_ordering_key_follow_in_order(
    send: Callable[..., OutboxCapture],
) -> None:
    target = inboxes(1, "ordered")
    batch = Batch(ordering_key="note-1")
    send(target, batch=batch)
    delete = {**ACTIVITY, "type": "Delete", "id": "https://demo.example/activities/2"}
    sent = send(target, batch=batch, activity=delete)
    assert [s.type for s in sent] == ["Create", "Delete"]
    assert [row.state for row in rows(sent)] == ["queued", "waiting"]
    sent.deliver_all()
    assert [a["type"] for a in sent.inbox.activities()] == ["Create", "Delete"]
    assert [row.state for row in rows(sent)] == ["delivered", "delivered"]


def test_one_send_alone_and_the_synchronization_header(
    send: Callable[..., OutboxCapture],
) -> None:
    send(inboxes(1, "alone-a"))
    sent = send(inboxes(1, "alone-b"), batch=Batch(synchronize_collection=True))
    inbox = FakeInbox()
    sent[1].deliver(inbox)
    [request] = inbox.requests
    assert request.url == inboxes(1, "alone-b")[0]
    assert "collection-synchronization" in request.headers["Signature"]
    assert verify_signature(request, key(ACTOR))
    assert [row.state for row in rows(sent)] == ["queued", "delivered"]


def test_signature_check_fails_for_another_body_key_or_no_signature(
    send: Callable[..., OutboxCapture],
) -> None:
    inbox = FakeInbox(401, 202)
    send(inboxes(1, "forged"), actor=ED_ACTOR).deliver_all(inbox)
    for request in inbox.requests:  # one of each scheme
        assert verify_signature(request, key(ED_ACTOR))
        assert not verify_signature(dataclasses.replace(request, body=b"{}"), key(ED_ACTOR))
        assert not verify_signature(request, key(ACTOR))
        other_id = dataclasses.replace(key(ED_ACTOR), key_id=f"{ED_ACTOR}#other")
        assert not verify_signature(request, other_id)
    assert len({"Signature-Input" in r.headers for r in inbox.requests}) == 2
    unsigned = dataclasses.replace(inbox.requests[0], headers={})
    assert not verify_signature(unsigned, key(ED_ACTOR))


@pytest.mark.django_db(transaction=True)
def test_delivering_after_the_block_publishes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="django_outbox")
    with captured_sends() as sent, transaction.atomic():
        outbox.send(ACTOR, ACTIVITY, inboxes(1, "after"))
    with unreachable_broker():
        sent.deliver_all(FakeInbox(500))
    assert [task.countdown is not None for task in sent.tasks] == [False, True]
    assert caplog.text == ""


def test_rounds_are_bounded(
    send: Callable[..., OutboxCapture], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("django_outbox.testing.delivery.MAX_ROUNDS", 2)
    target, batch = inboxes(1, "bounded"), Batch(ordering_key="chain")
    for _ in range(3):
        sent = send(target, batch=batch)
    with pytest.raises(DeliveryLoop, match="after 2 rounds"):
        sent.deliver_all()
    assert [row.state for row in rows(sent)] == ["delivered", "delivered", "queued"]


def test_a_portable_inbox_through_its_gateways(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    did = "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2"
    portable = PortableInbox(
        f"ap://{did}/actor/inbox", ["https://down.example", "https://up.example"]
    )
    down, up = portable.targets()
    with captured_sends() as sent, django_capture_on_commit_callbacks(execute=True):
        outbox.send_portable(ACTOR, ACTIVITY, [portable])
    assert sent.inboxes == [portable.inbox]
    [row] = sent.deliver_all(inboxes={down: FakeInbox(503)})
    assert sent.inbox.urls == [up]
    assert row.state == DeliveryState.DELIVERED

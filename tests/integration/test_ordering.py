"""Ordering keys end to end: a Delete never overtakes its Create at an inbox.

Each test runs a real worker (tests/support/chaos.py, on the private broker) and no
sweeper at all, so a delivery that arrives did so because the one before it
settled and promoted it at once, not because a sweep found it stranded.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.utils import timezone

from django_outbox import Batch, outbox
from django_outbox.models import Delivery, DeliveryState
from testproject.demo.keys import ACTOR
from testproject.demo.models import SignalLog
from testproject.inbox_servers import Behaviour, InboxServer, RecordedRequest
from tests.support.chaos import Workers, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.broker]

NOTE_ID = "https://demo.example/notes/ordered"
#: Retries within a second (chaos workers keep the default 30 s): the order is tested
#: here, not the backoff.
QUICK_RETRIES = {"OUTBOX_RETRY_BASE": 0.2, "OUTBOX_RETRY_CAP": 1.0}
KEY = NOTE_ID
CREATE = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Create", "id": "c1"}
DELETE = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Delete", "id": "d1"}


def kinds(requests: list[RecordedRequest]) -> list[tuple[str, int]]:
    """``(activity type, answered status)`` of each request, in arrival order."""
    return [(json.loads(r.body)["type"], r.status) for r in requests]


def row(activity: dict[str, Any], inbox: str) -> Delivery:
    return Delivery.objects.get(message__activity_type=activity["type"], inbox=inbox)


def none_live() -> bool:
    return (
        Delivery.objects.exists()
        and not Delivery.objects.filter(
            state__in=(DeliveryState.WAITING, DeliveryState.QUEUED, DeliveryState.SENDING)
        ).exists()
    )


def test_a_delete_waits_for_its_create_only_at_the_inbox_that_is_retrying(
    chaos_workers: Workers, inbox_server: InboxServer
) -> None:
    """The Create to /flaky fails three times before it is accepted; the Delete queued
    after it arrives after that, at once; the other inboxes get both straight away."""
    chaos_workers.start(1, extra=QUICK_RETRIES)
    inbox_server.behave("/flaky", Behaviour(statuses=(500, 500, 500, 202)))
    paths = ("/flaky", "/a", "/b", "/c")
    inboxes = [inbox_server.url(p) for p in paths]
    sent = time.time()
    outbox.send(ACTOR, CREATE, inboxes, batch=Batch(ordering_key=KEY))
    outbox.send(ACTOR, DELETE, inboxes, batch=Batch(ordering_key=KEY))
    others = paths[1:]
    wait_until(lambda: all(len(inbox_server.requests(p)) == 2 for p in others), 15)
    # The other inboxes are done while the flaky one's Delete still waits its turn.
    assert row(DELETE, inboxes[0]).state == DeliveryState.WAITING
    wait_until(none_live, 30)

    flaky = inbox_server.requests("/flaky")
    assert kinds(flaky) == [("Create", 500)] * 3 + [("Create", 202), ("Delete", 202)]
    accepted, delete = flaky[3], flaky[4]
    # Dispatched when the Create settled, not at a sweep (there is none in this test).
    assert delete.received_at - accepted.received_at < 1.5
    for path in others:
        got = inbox_server.requests(path)
        assert kinds(got) == [("Create", 202), ("Delete", 202)]
        assert got[1].received_at - sent < 3
        assert got[1].received_at < accepted.received_at
    assert (row(CREATE, inboxes[0]).attempts, row(DELETE, inboxes[0]).attempts) == (4, 1)
    assert set(Delivery.objects.values_list("state", flat=True)) == {DeliveryState.DELIVERED}


def test_a_create_given_up_at_its_deadline_lets_the_delete_go(
    chaos_workers: Workers, inbox_server: InboxServer
) -> None:
    """The Create's batch deadline passes while its inbox answers 503: it is given up
    and the Delete behind it goes at once."""
    chaos_workers.start(1, extra=QUICK_RETRIES)
    inbox_server.behave("/down", Behaviour(statuses=(503,)))
    down, up = inbox_server.url("/down"), inbox_server.url("/up")
    deadline = timezone.now() + timedelta(seconds=2.5)
    outbox.send(ACTOR, CREATE, [down, up], batch=Batch(ordering_key=KEY, deadline=deadline))
    outbox.send(ACTOR, DELETE, [down, up], batch=Batch(ordering_key=KEY))
    wait_until(lambda: row(CREATE, down).state == DeliveryState.FAILED, 15)
    inbox_server.behave("/down", Behaviour())
    wait_until(none_live, 15)

    create = row(CREATE, down)
    assert create.deadline_reached
    assert row(DELETE, down).state == DeliveryState.DELIVERED
    got = kinds(inbox_server.requests("/down"))
    assert got[-1] == ("Delete", 202)
    first_delete = next(i for i, (kind, _) in enumerate(got) if kind == "Delete")
    assert all(kind == "Create" for kind, _ in got[:first_delete])
    assert all(kind == "Delete" for kind, _ in got[first_delete:])
    assert kinds(inbox_server.requests("/up")) == [("Create", 202), ("Delete", 202)]


def test_a_create_held_by_an_open_breaker_keeps_the_delete_waiting(
    chaos_workers: Workers, inbox_server: InboxServer
) -> None:
    """A 503 opens the host's breaker (threshold 1): the Create's retry is held, not
    sent, and the Delete waits through the hold; an inbox on another host is not held."""
    extra = {
        **QUICK_RETRIES,
        "OUTBOX_BREAKER_THRESHOLD": 1,
        "OUTBOX_BREAKER_COOL_OFF": 3,
        "DEMO_LOG_SIGNALS": True,
    }
    chaos_workers.start(1, extra=extra)
    inbox_server.behave("/inbox", Behaviour(statuses=(503, 202)))
    with InboxServer("127.0.0.2") as other:
        held, free = inbox_server.url(), other.url()
        outbox.send(ACTOR, CREATE, [held, free], batch=Batch(ordering_key=KEY))
        outbox.send(ACTOR, DELETE, [held, free], batch=Batch(ordering_key=KEY))
        wait_until(none_live, 30)
        assert kinds(other.requests()) == [("Create", 202), ("Delete", 202)]
    assert kinds(inbox_server.requests()) == [("Create", 503), ("Create", 202), ("Delete", 202)]
    create = row(CREATE, held)
    assert SignalLog.objects.filter(signal="attempted", delivery_id=create.pk, held=True).exists()
    assert create.attempts == 2  # a hold spends no attempt
    assert row(DELETE, held).attempts == 1


def test_a_requeued_delete_waits_again_behind_its_live_create(
    chaos_workers: Workers, inbox_server: InboxServer
) -> None:
    """The admin gives up the waiting Delete, then requeues it while the Create is still
    being retried: it waits again, and goes once the Create is accepted."""
    chaos_workers.start(1, extra=QUICK_RETRIES)
    inbox_server.behave("/inbox", Behaviour(statuses=(500, 500, 202)))
    inbox = inbox_server.url()
    outbox.send(ACTOR, CREATE, [inbox], batch=Batch(ordering_key=KEY))
    outbox.send(ACTOR, DELETE, [inbox], batch=Batch(ordering_key=KEY))
    delete = Delivery.objects.filter(message__activity_type="Delete")
    assert outbox.give_up(delete, "by hand") == 1
    assert outbox.requeue(delete) == 1
    assert delete.get().state == DeliveryState.WAITING
    wait_until(none_live, 30)
    assert kinds(inbox_server.requests()) == [
        ("Create", 500),
        ("Create", 500),
        ("Create", 202),
        ("Delete", 202),
    ]


@pytest.mark.postgres_only
def test_a_delete_committed_as_its_create_settles_is_not_left_waiting(
    chaos_workers: Workers, inbox_server: InboxServer
) -> None:
    """The view's transaction writes the Delete as waiting (the Create is in flight) and
    commits only after the Create settled: the Delete must still go at once."""
    chaos_workers.start(1, extra=QUICK_RETRIES)
    inbox_server.behave("/inbox", Behaviour(delay=1.0))
    inbox = inbox_server.url()
    outbox.send(ACTOR, CREATE, [inbox], batch=Batch(ordering_key=KEY))
    wait_until(lambda: inbox_server.requests(), 15)
    with transaction.atomic():
        outbox.send(ACTOR, DELETE, [inbox], batch=Batch(ordering_key=KEY))
        assert row(DELETE, inbox).state == DeliveryState.WAITING
        # Read committed: the worker's save of the Create is visible in here.
        wait_until(lambda: row(CREATE, inbox).state == DeliveryState.DELIVERED, 15)
        time.sleep(0.5)  # and the worker's look for a successor has passed
    wait_until(none_live, 10)
    assert kinds(inbox_server.requests()) == [("Create", 202), ("Delete", 202)]


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_sends_with_one_key_in_open_transactions_take_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nothing is published: a worker writing these rows would race the table flush.
    monkeypatch.setattr("django_outbox.broker.publish.publish", lambda *args, **kwargs: True)
    monkeypatch.setattr("django_outbox.sending.fanout.publish", lambda *args, **kwargs: True)
    inbox = "https://one.example/inbox"
    first_open = threading.Event()
    release_first = threading.Event()
    second_done = threading.Event()

    def first() -> None:
        with transaction.atomic():
            outbox.send(ACTOR, {"type": "Create"}, [inbox], batch=Batch(ordering_key="note-9"))
            first_open.set()
            release_first.wait(10)
        connections.close_all()

    def second() -> None:
        first_open.wait(10)
        with transaction.atomic():
            outbox.send(ACTOR, {"type": "Delete"}, [inbox], batch=Batch(ordering_key="note-9"))
        second_done.set()
        connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    assert not second_done.wait(1.0)  # waits for the first send's transaction
    release_first.set()
    for thread in threads:
        thread.join(10)
    states = list(Delivery.objects.order_by("id").values_list("state", flat=True))
    assert states[1] == DeliveryState.WAITING

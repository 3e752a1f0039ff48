"""Unavailable hosts and senders that are gone, with a real worker."""

from __future__ import annotations

from datetime import date

import pytest
from django.utils import timezone

from django_outbox import outbox
from django_outbox.destinations.availability import forget_cached
from django_outbox.models import Delivery, Host
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

NOTE = {"type": "Create", "id": "https://demo.example/notes/1"}
FOLLOW = {"type": "Follow", "id": "https://demo.example/follows/1"}


@pytest.mark.django_db(transaction=True)
def test_deliveries_to_an_unavailable_host_are_skipped_but_a_follow_goes(worker: Worker) -> None:
    host = "127.0.0.3"
    inbox_server = InboxServer(host).start()
    Host.objects.create(
        name=host, failure_days=7, last_failure_day=date.today(), unavailable_since=timezone.now()
    )
    forget_cached()
    outbox.send(ACTOR, NOTE, [inbox_server.url("/a")])
    skipped = wait_for(lambda: Delivery.objects.filter(state="skipped").first(), 90)
    assert skipped.attempts == 0
    assert "unavailable" in skipped.last_error
    outbox.send(ACTOR, FOLLOW, [inbox_server.url("/b")])
    wait_for(lambda: Delivery.objects.filter(state="delivered").exists())
    assert [r.path for r in inbox_server.requests()] == ["/b"]
    assert not Host.objects.exists()  # the Follow's success made it available
    inbox_server.stop()


@pytest.mark.django_db(transaction=True)
def test_a_401_for_a_sender_that_is_gone_is_refused_at_once(
    worker: Worker, inbox_server: InboxServer
) -> None:
    inbox_server.behave("/inbox", Behaviour(statuses=(401,)))
    outbox.send("https://demo.example/users/gone-bob", NOTE, [inbox_server.url()])
    row = wait_for(lambda: Delivery.objects.filter(state="refused").first())
    assert (row.attempts, row.last_status) == (1, 401)
    assert "sender is gone" in row.last_error
    inbox_server.behave("/other", Behaviour(statuses=(401,)))
    outbox.send("https://demo.example/users/carol", NOTE, [inbox_server.url("/other")])
    retried = wait_for(
        lambda: Delivery.objects.filter(inbox__endswith="/other", attempts__gte=2).first()
    )
    assert retried.state in ("queued", "sending", "failed")

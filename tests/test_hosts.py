"""Failing and unavailable hosts, senders that are gone, with a real worker."""

from __future__ import annotations

from datetime import date, timedelta
from unittest import mock

import pytest
from django.test import override_settings
from django.utils import timezone

from django_outbox import outbox
from django_outbox.hosts import forget_cached, record_failures, record_successes
from django_outbox.models import Delivery, Host
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.conftest import Worker, wait_for

NOTE = {"type": "Create", "id": "https://demo.example/notes/1"}
FOLLOW = {"type": "Follow", "id": "https://demo.example/follows/1"}


def fail_on(day: date, hosts: list[str]) -> None:
    moment = timezone.now().replace(year=day.year, month=day.month, day=day.day)
    with mock.patch("django_outbox.hosts.timezone.now", return_value=moment):
        record_failures(hosts)


@pytest.mark.django_db
def test_a_host_failing_on_seven_distinct_days_becomes_unavailable() -> None:
    start = date(2026, 3, 1)
    for offset in range(6):
        fail_on(start + timedelta(days=offset), ["a.example"])
        fail_on(start + timedelta(days=offset), ["a.example"])  # same day counts once
    host = Host.objects.get(name="a.example")
    assert (host.failure_days, host.unavailable_since) == (6, None)
    fail_on(start + timedelta(days=6), ["a.example", "b.example"])
    host.refresh_from_db()
    assert host.failure_days == 7
    assert host.unavailable_since is not None
    assert Host.objects.get(name="b.example").failure_days == 1


@pytest.mark.django_db
def test_any_success_makes_a_host_available_again() -> None:
    with override_settings(OUTBOX_UNAVAILABLE_AFTER_DAYS=1):
        record_failures(["a.example"])
    assert Host.objects.get().unavailable_since is not None
    record_successes(["a.example"])
    assert not Host.objects.exists()


@pytest.mark.integration
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


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_401_for_a_sender_that_is_gone_is_refused_at_once(
    worker: Worker, inbox_server: InboxServer
) -> None:
    inbox_server.behave("/inbox", Behaviour(statuses=(401,)))
    outbox.send("https://demo.example/users/gone-bob", NOTE, [inbox_server.url()])
    row = wait_for(lambda: Delivery.objects.filter(state="refused").first())
    assert (row.attempts, row.last_status) == (1, 401)
    assert "sender is gone" in row.last_error
    outbox.send("https://demo.example/users/carol", NOTE, [inbox_server.url("/other")])
    inbox_server.behave("/other", Behaviour(statuses=(401,)))
    retried = wait_for(
        lambda: Delivery.objects.filter(inbox__endswith="/other", attempts__gte=2).first()
    )
    assert retried.state in ("queued", "sending", "failed")

"""Chaos about who owns a claim: a live owner keeps it however long its request, a dead
one loses it within seconds, and a delivery that kills its owner every time ends.

Real ``celery worker`` processes with the package's default timers (a lease of
300 s, heartbeats every 3 s, a heartbeat timeout of 15 s), no beat and no sweep.
Nothing here depends on the broker, so these run on Redis only.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from django_outbox import Batch, outbox
from django_outbox.models import Delivery, DeliveryState, Heartbeat, Message
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.chaos import NOTE, Workers, children, delivered, drive, kill, report, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: The package's default heartbeat timeout.
TIMEOUT = 15
#: An answer trickled over 25 s (its 44 bytes one every half second, after 3 s): longer
#: than the heartbeat timeout by ten seconds (three recovery passes and more), shorter
#: than the default total timeout (30 s), and never 10 s without a byte (the default
#: read timeout), so that it is answered, not cut.
SLOW = 25
TRICKLING = Behaviour(delay=3, trickle=0.5)


@pytest.mark.postgres_only  # the rule's SQL runs on SQLite in tests/unit
def test_a_live_owners_request_longer_than_the_heartbeat_timeout_is_sent_once(
    chaos_workers: Workers, inbox_server: InboxServer
) -> None:
    """The rule that keeps a slow request from being sent twice is the owner's heartbeat,
    not a timer: a live owner's claim is never taken back.  A request longer than half
    the default lease (150 s) would show it only slowly; one longer than the heartbeat
    timeout by a good margin shows the same rule with defaults.  As a control, a claim
    of a process that never beats, made at the same time, is taken back meanwhile:
    recovery passes did run and judge owners while the slow request was out."""
    inbox_server.behave("/slow", TRICKLING)
    (worker,) = chaos_workers.start(1)
    # The processes judge others only after beating steadily for two intervals.
    wait_until(lambda: _steady(children(worker.pid)), 20, every=0.5)
    outbox.send(ACTOR, NOTE, [inbox_server.url("/slow")])
    wait_until(lambda: inbox_server.requests("/slow"), 15)
    slow = Delivery.objects.get()
    owner = slow.claimed_by
    ghost = _claimed_by_a_process_that_never_beats(inbox_server.url("/ghost"))
    sent = time.monotonic()
    while Delivery.objects.get(pk=slow.pk).state == DeliveryState.SENDING:
        assert Delivery.objects.get(pk=slow.pk).claimed_by == owner, "a live claim was taken"
        assert time.monotonic() - sent < SLOW + 15, "the slow request never settled"
        time.sleep(0.2)
    took = time.monotonic() - sent
    wait_until(lambda: Delivery.objects.get(pk=ghost.pk).state == DeliveryState.DELIVERED, 30)
    slow.refresh_from_db()
    report(
        "slow live request", seconds=round(took, 1), requests=len(inbox_server.requests("/slow"))
    )
    assert (slow.state, slow.attempts) == (DeliveryState.DELIVERED, 1)
    assert len(inbox_server.requests("/slow")) == 1
    assert took > SLOW - 1
    assert len(inbox_server.requests("/ghost")) == 1


def _steady(pids: list[int]) -> bool:
    """Whether each of ``pids`` has beaten for two intervals (6 s) and beats still."""
    now = timezone.now()
    rows = Heartbeat.objects.filter(
        started_at__lte=now - timedelta(seconds=7), beat_at__gte=now - timedelta(seconds=TIMEOUT)
    )
    return len(pids) > 0 and all(rows.filter(name__contains=f":{pid}:").exists() for pid in pids)


def _claimed_by_a_process_that_never_beats(inbox: str) -> Delivery:
    """A delivery claimed a minute ago by a process with no heartbeat."""
    message = Message.objects.get()
    return Delivery.objects.create(
        message=message,
        inbox=inbox,
        host="127.0.0.1",
        state=DeliveryState.SENDING,
        attempts=1,
        claimed_by="ghost:1:000000000000:1",
        lease_until=timezone.now() + timedelta(seconds=240),
    )


def test_a_delivery_that_kills_its_worker_every_time_ends_failed(
    chaos_workers: Workers, inbox_server: InboxServer
) -> None:
    """Each attempt's pool process is SIGKILLed mid-request; the recovery pass takes the
    delivery back once the process's heartbeat is stale, and after its two attempts fails
    it instead."""
    inbox_server.behave("/poison", Behaviour(delay=60))
    (worker,) = chaos_workers.start(1, concurrency=1)
    started = time.monotonic()
    outbox.send(ACTOR, NOTE, [inbox_server.url("/poison")], batch=Batch(max_attempts=2))
    for attempt in (1, 2):
        wait_until(lambda a=attempt: len(inbox_server.requests("/poison")) >= a, 45)
        kill(children(worker.pid))
    drive(1, 45)
    row = Delivery.objects.get()
    report("poison delivery", seconds=round(time.monotonic() - started, 1))
    assert (row.state, row.attempts) == (DeliveryState.FAILED, 2)
    assert "lost during every attempt" in row.last_error
    time.sleep(1)
    assert len(inbox_server.requests("/poison")) == 2


def test_a_short_lease_still_sends(chaos_workers: Workers, inbox_server: InboxServer) -> None:
    """A lease shorter than two total timeouts plus 10 s (system check W003) still
    delivers: the worker starts a delivery within the first half of such a lease, rather
    than giving every one back unsent, at once, forever."""
    chaos_workers.start(1, extra={"OUTBOX_LEASE_SECONDS": 15, "OUTBOX_TOTAL_TIMEOUT": 5})
    outbox.send(ACTOR, NOTE, [inbox_server.url()])
    wait_until(lambda: delivered() == 1, 20)
    assert len(inbox_server.requests()) == 1

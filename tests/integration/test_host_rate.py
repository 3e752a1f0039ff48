"""Requests per second at a host: its rate, a 429's slow-down, the slow start after a
breaker closes or a pause ends.

Two real worker processes (two ``celery worker`` of one process each) share the
host's rate and breaker in the tests' Redis; one loopback host records when each
request arrived.  The figures asserted are rates *at the host*, the behaviour asked
for, not our own speed: each bound allows for the edges of a turn (a request whose
turn falls on a window's edge may land on either side, so a sliding window may hold
one more than the rate) and nothing is asserted about how fast we deliver beyond
"everything arrives in the end".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest

from django_outbox import outbox
from django_outbox.models import Delivery
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_state]

HOST = "127.0.0.1"  # the inbox server's host name, as the rate settings name it


def most_in_window(times: Sequence[float], width: float) -> int:
    """The most of ``times`` within any window of ``width`` seconds (sliding: each
    window starts at one of them)."""
    ordered = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= width:
            first += 1
        most = max(most, last - first + 1)
    return most


def most_at_once(arrivals: Sequence[float], answer: float) -> int:
    """The most requests under way together at a host that answers each ``answer``
    seconds after it arrived (one ending as another arrives is not together)."""
    events = sorted([(t, 1) for t in arrivals] + [(t + answer, -1) for t in arrivals])
    most = now = 0
    for _, change in events:
        now += change
        most = max(most, now)
    return most


def two_workers(make_worker: Callable[..., Worker], **settings: object) -> None:
    """Two worker processes with ``settings``."""
    for _ in range(2):
        make_worker(concurrency=1, **settings)


def send(inbox_server: InboxServer, path: str, count: int) -> None:
    """One activity to ``count`` inboxes under ``path`` on the host."""
    inboxes = [inbox_server.url(f"{path}?n={n}") for n in range(count)]
    outbox.send(ACTOR, {"type": "Create", "id": path}, inboxes)


def test_a_host_limited_to_5_per_second_receives_at_most_5_per_second(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    """Over 20 s of a backlog larger than 20 s of the rate, no sliding 1 s window at
    the host holds more than 5 + 1 requests (the 1: a turn on the window's edge)."""
    two_workers(make_worker, OUTBOX_HOST_RATES={HOST: 5.0})
    send(inbox_server, "/rated", 160)
    wait_for(lambda: len(inbox_server.requests("/rated")) >= 1, 30)
    start = min(r.received_at for r in inbox_server.requests("/rated"))
    time.sleep(max(0.0, start + 20.0 - time.time()))
    times = [r.received_at for r in inbox_server.requests("/rated") if r.received_at < start + 20]
    print(f"rate 5/s: {len(times)} requests in 20 s, most in 1 s {most_in_window(times, 1.0)}")
    assert most_in_window(times, 1.0) <= 5 + 1, sorted(t - start for t in times)
    assert len(times) <= 20 * 5 + 1
    assert len(times) >= 20, "the host was sent to throughout"


def test_a_host_answering_429_gets_one_request_per_worker_per_retry_after(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    """While the host answers ``429 Retry-After: 5`` (10 s), no sliding 5 s window holds
    more than one request per worker (2).  ``OUTBOX_PER_HOST = 1`` makes "per worker"
    what a worker sends at once: with the default each worker's first contact could send
    that many together, before any answer says 429.  Then every delivery arrives."""
    two_workers(make_worker, OUTBOX_PER_HOST=1)
    count = 20
    inbox_server.behave("/busy", Behaviour(statuses=(429,), headers={"Retry-After": "5"}))
    send(inbox_server, "/busy", count)
    wait_for(lambda: len(inbox_server.requests("/busy")) >= 1, 30)
    start = min(r.received_at for r in inbox_server.requests("/busy"))
    time.sleep(max(0.0, start + 10.0 - time.time()))
    inbox_server.behave("/busy", Behaviour(statuses=(202,)))
    throttled = [r.received_at for r in inbox_server.requests("/busy") if r.status == 429]
    print(f"429 for 10 s: {len(throttled)} requests, at {[round(t - start, 2) for t in throttled]}")
    assert most_in_window(throttled, 5.0) <= 2, [t - start for t in throttled]
    wait_for(lambda: Delivery.objects.filter(state="delivered").count() == count, 120)
    accepted = {r.path for r in inbox_server.requests("/busy") if r.status == 202}
    assert len(accepted) == count


def test_after_a_breaker_closes_the_host_starts_slowly(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    """A host limited to 10/s fails until its breaker opens, then answers well: in the
    10 s after the probe's success it receives at most a quarter of what it receives in
    the 10 s starting 60 s later (``OUTBOX_SLOW_START_SECONDS`` = 60: from 1/s, growing
    by a constant factor to 10/s)."""
    two_workers(make_worker, OUTBOX_HOST_RATES={HOST: 10.0}, OUTBOX_BREAKER_COOL_OFF=5.0)
    inbox_server.behave("/back", Behaviour(statuses=(500,)))
    send(inbox_server, "/back", 400)
    wait_for(lambda: len(inbox_server.requests("/back")) >= 10, 30)
    inbox_server.behave("/back", Behaviour(statuses=(202,)))
    wait_for(lambda: any(r.status == 202 for r in inbox_server.requests("/back")), 60)
    closed = min(r.received_at for r in inbox_server.requests("/back") if r.status == 202)
    time.sleep(max(0.0, closed + 70.0 - time.time()))
    times = [r.received_at - closed for r in inbox_server.requests("/back") if r.status == 202]
    first = sum(1 for t in times if 0 <= t < 10)
    later = sum(1 for t in times if 60 <= t < 70)
    print(f"slow start: {first} requests in the first 10 s, {later} in 60-70 s")
    assert first * 4 <= later, sorted(times)


def test_after_a_pause_ends_the_host_starts_slowly(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    """100 deliveries held by a pause, then resumed: the host has no rate of its own, so
    without a slow start all would arrive within the release's 12 s; from the floor
    (1/s, doubling 8 times over the 60 s of ``OUTBOX_SLOW_START_SECONDS``) about 20
    arrive in the first 10 s.  At most 40 may; then every delivery arrives."""
    two_workers(make_worker)
    count = 100
    outbox.pause_host(HOST, "maintenance")
    send(inbox_server, "/paused", count)
    held = Delivery.objects.filter(last_error__startswith=f"held: {HOST} is paused")
    wait_for(lambda: held.count() == count, 60)
    assert not inbox_server.requests("/paused")
    outbox.resume_host(HOST)
    wait_for(lambda: len(inbox_server.requests("/paused")) >= 1, 30)
    first = min(r.received_at for r in inbox_server.requests("/paused"))
    time.sleep(max(0.0, first + 10.0 - time.time()))
    early = sum(1 for r in inbox_server.requests("/paused") if r.received_at < first + 10.0)
    wait_for(lambda: Delivery.objects.filter(state="delivered").count() == count, 120)
    times = sorted(round(r.received_at - first, 1) for r in inbox_server.requests("/paused"))
    print(f"after a pause: {early} requests in the first 10 s, all {count} by {times[-1]} s")
    assert early <= 40, times


def test_after_a_breaker_closes_a_slow_host_gets_one_request_at_a_time_at_first(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    """A host that answers in 3 s, with ``OUTBOX_PER_HOST`` = 8: its rate alone (1/s
    doubling every 5 s) would let 8 requests be under way within 10 s of its breaker
    closing; its concurrency ramps too, from one, so in those 10 s the worker process
    has at most one there (two for the moment the breaker closes while another
    delivery is admitted), and after the 40 s slow start it has 6 to 8 at once.  The
    time budget and lease are the defaults' shape, long enough for 3 s answers."""
    make_worker(
        concurrency=1,
        OUTBOX_PER_HOST=8,
        OUTBOX_BREAKER_COOL_OFF=5.0,
        OUTBOX_SLOW_START_SECONDS=40.0,
        OUTBOX_TOTAL_TIMEOUT=10,
        OUTBOX_LEASE_SECONDS=120,
    )
    inbox_server.behave("/slow", Behaviour(statuses=(500,)))
    send(inbox_server, "/slow", 150)
    wait_for(lambda: len(inbox_server.requests("/slow")) >= 10, 30)
    inbox_server.behave("/slow", Behaviour(statuses=(202,), delay=3.0))
    wait_for(lambda: any(r.status == 202 for r in inbox_server.requests("/slow")), 60)
    closed = min(r.received_at for r in inbox_server.requests("/slow") if r.status == 202) + 3
    time.sleep(max(0.0, closed + 55.0 - time.time()))
    arrivals = [r.received_at for r in inbox_server.requests("/slow") if r.status == 202]
    early = most_at_once([t for t in arrivals if t < closed + 10], 3.0)
    late = most_at_once([t for t in arrivals if closed + 40 <= t < closed + 55], 3.0)
    print(
        f"slow host after its breaker closed: {early} at once in the first 10 s, {late} "
        f"40-55 s later; {len(arrivals)} requests"
    )
    assert early <= 2, sorted(round(t - closed, 1) for t in arrivals)
    assert late >= 6, sorted(round(t - closed, 1) for t in arrivals)

"""Held deliveries come back when their host does, and a 429 only throttles (issue 28).

Real worker processes at the package's default settings (those the test workers
change for speed are set back), one loopback host, breakers in the tests' Redis.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import pytest

from django_outbox import outbox
from django_outbox.breakers.configured import configured_store
from django_outbox.models import Delivery
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_state]

#: The package's defaults for what the test workers change (tests/support/workers.py).
DEFAULTS = {
    "OUTBOX_RETRY_BASE": 30.0,
    "OUTBOX_RETRY_CAP": 8 * 3600.0,
    "OUTBOX_LEASE_SECONDS": 300,
    "OUTBOX_TOTAL_TIMEOUT": 30,
    "OUTBOX_CONCURRENCY": 256,
    "OUTBOX_PER_HOST": 2,
}
#: Slow start and slow-down off: these tests watch the release of held deliveries and the
#: hold a 429 asks, at full speed; tests/integration/test_host_rate.py watches the rate.
NO_SLOW_START = {"OUTBOX_SLOW_START_SECONDS": 0}
COOL_OFF = 60.0  # OUTBOX_BREAKER_COOL_OFF's default
THRESHOLD = 10  # OUTBOX_BREAKER_THRESHOLD's default


def test_deliveries_held_by_an_open_breaker_come_back_when_the_host_answers_again(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    make_worker(concurrency=2, **DEFAULTS, **NO_SLOW_START)
    inbox_server.behave("/flaky", Behaviour(statuses=(500,)))
    outbox.send(
        ACTOR, {"type": "Create", "id": "x"}, [inbox_server.url(f"/flaky?n={n}") for n in range(30)]
    )
    wait_for(lambda: len(inbox_server.requests("/flaky")) >= THRESHOLD, 30)
    time.sleep(1.0)
    # The breaker opened after the threshold of 500s: nothing more was sent.
    assert len(inbox_server.requests("/flaky")) == THRESHOLD
    assert configured_store().states(), "the breaker is open"
    inbox_server.behave("/flaky", Behaviour(statuses=(202,)))
    wait_for(lambda: Delivery.objects.filter(state="delivered").count() == 30, COOL_OFF + 60)
    answered = [r for r in inbox_server.requests("/flaky") if r.status == 202]
    first = min(r.received_at for r in answered)
    # The probe after the cool-off was the endpoint's first 2xx; every held delivery came
    # back within 10 s of it (before: one more cool-off, held while the probe was out).
    late = sorted(round(r.received_at - first, 1) for r in answered)
    assert late[-1] <= 10.0, late
    assert len({r.path for r in answered}) == 30


def test_a_429_holds_the_host_for_the_time_asked_and_never_opens_its_breaker(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    make_worker(concurrency=2, **DEFAULTS, **NO_SLOW_START)
    count = 12  # more than the breaker's threshold of first tries, all answered 429
    for n in range(count):
        slow = Behaviour(statuses=(429, 202), headers={"Retry-After": "3"})
        inbox_server.behave(f"/slow{n}", slow)
    outbox.send(
        ACTOR, {"type": "Create", "id": "y"}, [inbox_server.url(f"/slow{n}") for n in range(count)]
    )
    store = configured_store()
    opened: list[object] = []

    def done() -> bool:
        opened.extend(store.states())
        return Delivery.objects.filter(state="delivered").count() == count

    wait_for(done, 90, every=0.2)
    assert not opened, "429s never open the breaker"
    waits = []
    for n in range(count):
        first, second = inbox_server.requests(f"/slow{n}")  # one 429, then accepted
        assert (first.status, second.status) == (429, 202)
        waits.append(second.received_at - first.received_at)
    # About the 3 s asked (not the 30 s of the retry schedule); a delivery may be held
    # once more by another's 429 that renewed the host's hold meanwhile.
    assert all(2.9 <= wait <= 12.0 for wait in waits), waits
    assert statistics.median(waits) <= 7.0, waits

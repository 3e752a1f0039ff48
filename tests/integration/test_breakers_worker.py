"""Circuit breakers shared by two worker processes, through a real Redis."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_outbox import outbox
from django_outbox.models import Delivery
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_state]

THRESHOLD = 3
COOL_OFF = 3.0


SETTINGS = {
    "OUTBOX_BREAKER_THRESHOLD": THRESHOLD,
    "OUTBOX_BREAKER_COOL_OFF": COOL_OFF,
    "OUTBOX_PER_HOST": 1,
    "OUTBOX_RETRY_BASE": 0.2,
    "OUTBOX_RETRY_CAP": 0.5,
    "OUTBOX_MAX_ATTEMPTS": 50,
}


def test_two_workers_count_failures_together_and_send_one_probe(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    # Two single-process workers with a small breaker, and no other worker.
    make_worker(concurrency=1, **SETTINGS)
    make_worker(concurrency=1, **SETTINGS)
    inbox_server.behave("/dead", Behaviour(statuses=(503,)))
    inboxes = [inbox_server.url(f"/dead?n={n}") for n in range(20)]
    outbox.send(ACTOR, {"type": "Create", "id": "x"}, inboxes)
    # The threshold's failures, the half-open probe, and the probe after that.
    wait_for(lambda: len(inbox_server.requests()) >= THRESHOLD + 2, 60)
    times = sorted(r.received_at for r in inbox_server.requests())
    opened, probe, next_probe = times[THRESHOLD - 1 : THRESHOLD + 2]
    # Both workers count together, and never have more than the threshold awaiting an
    # answer: after the threshold's failures nothing is sent until the cool-off is over.
    # (Gaps, not wall-clock windows, so a slow machine cannot move a request across.)
    assert probe - opened >= COOL_OFF - 0.2
    # Half-open: one probe between the two workers; it fails and opens the breaker for
    # another cool-off, so the next request waits for that cool-off too.
    assert next_probe - probe >= COOL_OFF - 0.2
    held = Delivery.objects.filter(last_error__startswith="held")
    assert held.count() >= 10
    assert max(row.attempts for row in held) <= 2  # holding spends no attempt
    inbox_server.behave("/dead", Behaviour(statuses=(202,)))
    wait_for(lambda: Delivery.objects.filter(state="delivered").count() == 20, 60)

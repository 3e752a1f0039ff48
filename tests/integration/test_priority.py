"""The priority lane overtakes a busy worker: a task blocked on a full engine takes it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_outbox import outbox
from django_outbox.models import Delivery, Lane
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.broker]

SLOW = 0.5
FAN_OUT = 60


def test_a_priority_send_overtakes_a_worker_waiting_for_room(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    # One Celery process whose engine holds 2 running and 8 waiting deliveries, so a
    # 50-delivery task for slow inboxes keeps its only Celery process waiting for room.
    make_worker(concurrency=1, OUTBOX_CONCURRENCY=2, OUTBOX_PER_HOST=2)
    inbox_server.behave("/slow", Behaviour(delay=SLOW))
    slow = [inbox_server.url(f"/slow?n={n}") for n in range(FAN_OUT)]
    outbox.send(ACTOR, {"type": "Create", "id": "https://demo.example/fan-out"}, slow)
    wait_for(lambda: len(inbox_server.requests("/slow")) >= 2, 30)

    # Another host name for the same server, so that the slow host's cap does not apply.
    urgent = inbox_server.url("/urgent", host="localhost")
    outbox.send(ACTOR, {"type": "Create", "id": "https://demo.example/dm"}, [urgent])
    assert Delivery.objects.get(inbox=urgent).lane == Lane.PRIORITY
    wait_for(lambda: inbox_server.requests("/urgent"), 30)

    # The fan-out's Celery task still waits for room for most of its 50 deliveries
    # (it takes about FAN_OUT / 2 * SLOW seconds): the priority lane's own Celery
    # message could not have run yet; the waiting task took the delivery itself.
    assert len(inbox_server.requests("/slow")) < FAN_OUT // 3
    wait_for(lambda: Delivery.objects.filter(state="delivered").count() == FAN_OUT + 1, 60)

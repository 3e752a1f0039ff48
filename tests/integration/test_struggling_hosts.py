"""A host that asks us to slow down is not a failing host, however many days it asks.

Real worker processes deliver to two hosts of one loopback server (``127.0.0.1`` and
``localhost`` are two hosts to the package): one answers ``429 Retry-After: 1``, the
control ``503`` with no ``Retry-After``.  Failure days are counted on the dates of the
failures the workers record (:mod:`django_outbox.destinations.failure_days`): the
simulated clock is that, at the end of each day, every date stored on the ``Host``
rows moves one day into the past, which is all the counting rule sees of a day passing.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

import pytest
from django.utils import timezone

from django_outbox import outbox
from django_outbox.models import Delivery, DeliveryState, Host
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = pytest.mark.django_db(transaction=True)

THROTTLING, FAILING = "127.0.0.1", "localhost"
DAYS = 8
UNAVAILABLE_AFTER_DAYS = 7  # the package's default


def a_day_passes() -> None:
    """Move every date the failure-day rule reads one day into the past."""
    for host in Host.objects.all():
        host.last_failure_day -= datetime.timedelta(days=1)
        host.first_failure_at -= datetime.timedelta(days=1)
        host.save(update_fields=["last_failure_day", "first_failure_at"])


def test_a_host_answering_429_for_8_days_is_never_marked_unavailable(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    """Each day one activity goes to both hosts.  The 503 host has failed on 7 days by
    the 7th and is marked unavailable (its 8th delivery is skipped); the 429 host never
    has a failure day and still receives the 8th.  A retry schedule of an hour makes each
    day's 503 one attempt, one failure on that day."""
    make_worker(concurrency=2, OUTBOX_RETRY_BASE=3600.0, OUTBOX_RETRY_CAP=3600.0)
    inbox_server.behave("/busy", Behaviour(statuses=(429,), headers={"Retry-After": "1"}))
    inbox_server.behave("/down", Behaviour(statuses=(503,)))
    busy = inbox_server.url("/busy", host=THROTTLING)
    down = inbox_server.url("/down", host=FAILING)

    def marked(name: str) -> bool:
        return Host.objects.filter(name=name, unavailable_since__isnull=False).exists()

    for day in range(1, DAYS + 1):
        activity = {"type": "Create", "id": f"https://demo.example/day/{day}"}
        message = outbox.send(ACTOR, activity, [busy, down])
        wait_for(lambda: len(inbox_server.requests("/busy")) >= day, 30)  # noqa: B023
        if day <= UNAVAILABLE_AFTER_DAYS:
            today = timezone.now().date()
            wait_for(
                lambda: Host.objects.filter(name=FAILING, last_failure_day=today).exists(),  # noqa: B023
                30,
            )
            assert len(inbox_server.requests("/down")) == day, "one 503 a day"
            assert marked(FAILING) == (day == UNAVAILABLE_AFTER_DAYS), day
        assert not Host.objects.filter(name=THROTTLING).exists(), f"day {day}: a 429 counted"
        a_day_passes()

    # Day 8: the 503 host's delivery is skipped, unsent; the 429 host's was sent.
    eighth = Delivery.objects.filter(message=message, host=FAILING)
    wait_for(lambda: eighth.filter(state=DeliveryState.SKIPPED).exists(), 30)
    assert len(inbox_server.requests("/down")) == UNAVAILABLE_AFTER_DAYS
    assert marked(FAILING)
    assert not marked(THROTTLING)
    statuses = {r.status for r in inbox_server.requests("/busy")}
    assert statuses == {429}, statuses

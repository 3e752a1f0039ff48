"""Chaos on a busy lane: a whole node killed for good, a process dead between commit and publish.

As in test_chaos.py: ``celery worker`` processes of the test's own on a private
broker, loopback hosts that record every request, every timer at the package's
default and no beat.  What is lost here is not claimed by anyone, so taking back
dead processes' claims does not find it: the messages a dead node had reserved
(kombu's Redis transport holds them unacknowledged for its hour of visibility
timeout; RabbitMQ gives them back at once) and rows whose message was never
published.  The recovery pass finds them by the oldest message waiting in the
lane (django_outbox/broker/lost.py) while the lane is still busy; before, they waited
for the lane to be empty, or for ``OUTBOX_REDISPATCH_AFTER`` (900 s).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.utils import timezone

from django_outbox import Batch, outbox
from django_outbox.models import Delivery, DeliveryState, Heartbeat, Lane
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour
from tests.support.chaos import (
    NOTE,
    Farm,
    Workers,
    children,
    delivered,
    group,
    in_flight,
    kill,
    report,
    states,
    wait_until,
)
from tests.support.chaos_watch import Recoveries
from tests.support.die_after_commit import die_after_commit
from tests.support.workers import Worker, rabbitmq

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.broker]

DELIVERIES = 5000
#: Seconds within which the survivor must have delivered everything (issue 21).
SURVIVOR_BOUND = 60
#: Seconds within which each fault must have recovered, as in test_chaos.py.
RECOVERY_BOUND = 30
#: Hosts answering in 200 ms (issue 21's busy lane).
ANSWERING = Behaviour(delay=0.2)
#: Deliveries one process sends at once: few enough that a node's work lasts longer
#: than the recovery, so that the lane is still busy when it comes (a capacity, not a
#: timer).
BUSY = {"OUTBOX_CONCURRENCY": 12}


class Backlogged:
    """Counts the deliveries of ``ids`` still stuck since ``since`` (queued, not published
    again); notes how many messages waited in the lane when none was left."""

    def __init__(self, broker: Any, ids: set[int], since: Any) -> None:
        self.broker, self.ids, self.since = broker, ids, since
        self.waiting_then: int | None = None

    def __call__(self) -> int:
        stuck = Delivery.objects.filter(
            id__in=self.ids, state=DeliveryState.QUEUED, dispatched_at__lte=self.since
        ).count()
        if not stuck and self.waiting_then is None:
            self.waiting_then = self.broker.queued([Lane.DEFAULT])
        return stuck


def leader_node(nodes: list[Worker]) -> Worker:
    """The node whose pool process leads the recovery pass (the oldest heartbeat)."""
    pools = {pid: node for node in nodes for pid in children(node.pid)}
    for name in Heartbeat.objects.order_by("id").values_list("name", flat=True):
        node = pools.get(int(name.split(":")[1]))
        if node is not None:
            return node
    raise AssertionError("none of the nodes beats")


def test_a_whole_node_killed_for_good_on_a_busy_lane(
    chaos_workers: Workers, chaos_broker: Any
) -> None:
    """Two nodes, 5,000 deliveries to hosts answering in 200 ms; the node that leads the
    recovery pass is SIGKILLed (main process and pool) and not started again.  The
    survivor leads within two heartbeats, takes back the dead node's claims, and finds
    the messages it had reserved by the lane's oldest waiting message: everything is
    delivered within 60 s of the kill."""
    nodes = chaos_workers.start(2, extra=BUSY)
    wait_until(lambda: Heartbeat.objects.count() >= 4, 30)
    doomed = leader_node(nodes)
    watch = Recoveries()
    with Farm(hosts=100, behaviour=ANSWERING) as farm:
        inboxes = farm.inboxes(DELIVERIES)
        outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="whole-node"))
        wait_until(lambda: delivered() >= DELIVERIES // 10, 60)
        wait_until(lambda: in_flight(children(doomed.pid)) > 0, 30, every=0.02)
        pids = [doomed.pid, *children(doomed.pid)]
        held, killed_at = chaos_broker.reserved(), timezone.now()
        kill(group(doomed.pid))
        doomed.process.wait()  # type: ignore[union-attr]
        killed = time.monotonic()
        stranded = in_flight(pids)
        reserved = set(
            Delivery.objects.filter(id__in=held, state=DeliveryState.QUEUED).values_list(
                "id", flat=True
            )
        )
        backlog = Backlogged(chaos_broker, reserved, killed_at)
        watch.fault("claims", lambda: in_flight(pids))
        watch.fault("reserved", backlog)
        wait_until(
            lambda: not Delivery.objects.exclude(state=DeliveryState.DELIVERED).exists(), 120
        )
        finished = round(time.monotonic() - killed, 1)
        recovered = watch.wait(RECOVERY_BOUND)
        tally = farm.tally(inboxes)
    # Still unacknowledged now that the survivor is idle: what the dead node held.
    its_own = reserved & chaos_broker.reserved()
    report(
        "whole node killed on a busy lane",
        recovered_seconds=recovered,
        stranded=stranded,
        reserved_unclaimed_at_kill=len(reserved),
        of_them_the_dead_node_s=len(its_own),
        waiting_in_lane_when_recovered=backlog.waiting_then,
        duplicates=tally.duplicates,
        requests=tally.requests,
        delivered_after_kill=finished,
    )
    assert states() == {DeliveryState.DELIVERED: DELIVERIES}
    assert tally.missing == 0
    assert stranded > 0
    # What it had reserved and not claimed was never sent: only its claims can repeat.
    assert tally.duplicates <= stranded
    assert finished <= SURVIVOR_BOUND
    assert all(s is not None and s <= RECOVERY_BOUND for s in recovered.values()), recovered
    if not rabbitmq():  # RabbitMQ gives a lost consumer's messages back at once
        assert its_own, "the kill left no reserved message unclaimed"
        assert backlog.waiting_then, "the lane was empty: the rule was not what found them"


def test_a_process_dead_between_commit_and_publish_on_a_busy_lane(
    chaos_workers: Workers, chaos_broker: Any
) -> None:
    """A send commits its 50 rows and its process is SIGKILLed before it publishes, while
    a fan-out keeps the lane busy and another is sent after it: once messages published
    after those rows wait in the lane, theirs would have been taken, and a heartbeat
    timeout later they are published again, the lane still busy."""
    if rabbitmq():
        pytest.skip(
            "RabbitMQ shows no message without taking it: there they wait for an empty lane"
        )
    chaos_workers.start(1, extra=BUSY)
    watch = Recoveries()
    with Farm(hosts=100, behaviour=ANSWERING) as farm:
        inboxes = farm.inboxes(DELIVERIES + 50)
        before, dying, after = inboxes[:1000], inboxes[1000:1050], inboxes[1050:]
        outbox.send(ACTOR, NOTE, before, batch=Batch(tag="before"))
        wait_until(lambda: delivered() >= 100, 60)
        die_after_commit(dying, "died")
        died = time.monotonic()
        rows = set(Delivery.objects.filter(inbox__in=dying).values_list("id", flat=True))
        assert len(rows) == 50
        assert not Delivery.objects.filter(id__in=rows, dispatched_at__isnull=True).exists()
        backlog = Backlogged(chaos_broker, rows, timezone.now())
        watch.fault("never published", backlog, at=died)
        time.sleep(3)
        outbox.send(ACTOR, NOTE, after, batch=Batch(tag="after"))
        wait_until(lambda: delivered() == DELIVERIES + 50, 120, every=0.25)
        seconds = round(time.monotonic() - died, 1)
        recovered = watch.wait(RECOVERY_BOUND)
        tally = farm.tally(inboxes)
    report(
        "process dead between commit and publish",
        recovered_seconds=recovered,
        waiting_in_lane_when_recovered=backlog.waiting_then,
        duplicates=tally.duplicates,
        requests=tally.requests,
        all_delivered_after=seconds,
    )
    assert states() == {DeliveryState.DELIVERED: DELIVERIES + 50}
    assert (tally.missing, tally.duplicates) == (0, 0)
    assert all(s is not None and s <= RECOVERY_BOUND for s in recovered.values()), recovered
    assert backlog.waiting_then, "the lane was empty: the rule was not what found them"

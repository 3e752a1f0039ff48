"""Chaos: faults during large fan-outs, with real workers, a real broker and database.

Each test runs its own ``celery worker`` processes (tests/support/chaos.py) on a
private ``redis-server`` (a private RabbitMQ node when the tests run on RabbitMQ:
tests/support/rabbitmq.py says what each fault is there), delivers to loopback
hosts that record every request, injects faults mid-run, and waits until nothing
is live.  Every timer is the package's default (a lease of 300 s, redispatch
after 900 s, heartbeats every 3 s and a timeout of 15 s) and no beat runs: what
moves deliveries again after a fault is the workers' recovery pass.

Each test asserts that every delivery settled and every inbox was reached, that
the duplicate requests (an inbox receiving the activity more than once) are no
more than the deliveries in flight at the faults, which is all at-least-once may
send twice, and that every fault recovered within :data:`RECOVERY_BOUND`
seconds: from the fault until none of the deliveries it left stuck is stuck
(tests/support/chaos_watch.py).  The figures are printed.
"""

from __future__ import annotations

import signal
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import transaction
from django.test import override_settings

from django_outbox import Batch, outbox
from django_outbox.models import Delivery, DeliveryState
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour
from tests.support.chaos import (
    NOTE,
    Farm,
    Workers,
    busiest,
    children,
    delivered,
    drive,
    group,
    in_flight,
    kill,
    pool_pids,
    report,
    states,
    wait_until,
)
from tests.support.chaos_servers import restart_postgres
from tests.support.chaos_watch import Recoveries
from tests.support.workers import rabbitmq

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.broker]

FAN_OUT = 2000
#: Seconds within which each fault must have recovered (issue 11).
RECOVERY_BOUND = 30
#: Deliveries one process sends at once in the fan-out tests: few enough that a
#: fan-out to servers answering in half a second lasts long enough for every fault to
#: land mid-run (a capacity setting, not a timer).
SLOW_RUN = {"OUTBOX_CONCURRENCY": 16, "OUTBOX_PER_HOST": 2}
#: Servers that answer after half a second, as loaded ones do.
LOADED = Behaviour(delay=0.5)


def test_a_fan_out_through_three_sigkills_and_a_flush_completes_within_two_minutes(
    chaos_workers: Workers, chaos_broker: Any
) -> None:
    """Issue 11's run: the README's worker (two pool processes), 2,000 inboxes on 200
    hosts answering in 500 ms; three pool processes SIGKILLed and the broker flushed
    mid-run (on RabbitMQ: the node killed and started again without its data)."""
    (worker,) = chaos_workers.start(1, extra=SLOW_RUN)
    watch = Recoveries()
    started = time.monotonic()
    with Farm(hosts=200, behaviour=LOADED) as farm:
        inboxes = farm.inboxes(FAN_OUT)
        outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="issue-11"))
        stranded: list[int] = []
        for n in range(3):
            wait_until(lambda n=n: delivered() >= (n + 1) * FAN_OUT // 6, 90)
            wait_until(lambda: len(pool_pids([worker])) == 2, 10)
            wait_until(lambda: in_flight(pool_pids([worker])) > 0, 30, every=0.02)
            pid = busiest(pool_pids([worker]))
            kill([pid])
            stranded.append(in_flight([pid]))
            watch.fault(f"SIGKILL {n + 1}", lambda pid=pid: in_flight([pid]))
        wait_until(lambda: delivered() >= FAN_OUT * 2 // 3, 90)
        at_flush = in_flight()
        queued = watch.lose_messages("flush", chaos_broker.flush)
        seconds, recovered = watch.settle(FAN_OUT, started)
        tally = farm.tally(inboxes)
    report(
        "3 x SIGKILL + flush",
        recovered_seconds=recovered,
        stranded_per_kill=stranded,
        in_flight_at_flush=at_flush,
        queued_at_flush=queued,
        duplicates=tally.duplicates,
        requests=tally.requests,
        seconds=seconds,
    )
    assert states() == {DeliveryState.DELIVERED: FAN_OUT}
    assert tally.missing == 0
    assert sum(stranded) > 0, "no kill hit a delivery in flight"
    assert queued > 0, "the flush came too late to lose anything"
    assert tally.duplicates <= sum(stranded) + at_flush
    assert all(s is not None and s <= RECOVERY_BOUND for s in recovered.values()), recovered
    assert seconds <= 120


def test_the_whole_worker_killed_and_started_again(chaos_workers: Workers) -> None:
    """Its main process and pool SIGKILLed at once; a new worker is started.  What it
    had claimed is taken back once its heartbeats are stale, by the new worker."""
    (first,) = chaos_workers.start(1, extra=SLOW_RUN)
    watch = Recoveries()
    started = time.monotonic()
    with Farm(hosts=50, behaviour=LOADED) as farm:
        inboxes = farm.inboxes(FAN_OUT // 2)
        outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="whole-worker"))
        wait_until(lambda: delivered() >= FAN_OUT // 8, 60)
        wait_until(lambda: in_flight(children(first.pid)) > 0, 30, every=0.02)
        pids = [first.pid, *children(first.pid)]
        kill(group(first.pid))
        first.process.wait()  # type: ignore[union-attr]
        stranded = in_flight(pids)
        watch.fault("whole worker", lambda: in_flight(pids))
        chaos_workers.start(1, extra=SLOW_RUN)
        seconds, recovered = watch.settle(FAN_OUT // 2, started)
        tally = farm.tally(inboxes)
    report(
        "whole worker killed and restarted",
        recovered_seconds=recovered,
        stranded=stranded,
        duplicates=tally.duplicates,
        requests=tally.requests,
        seconds=seconds,
    )
    assert states() == {DeliveryState.DELIVERED: FAN_OUT // 2}
    assert tally.missing == 0
    assert stranded > 0
    assert tally.duplicates <= stranded
    assert all(s is not None and s <= RECOVERY_BOUND for s in recovered.values()), recovered


def test_the_broker_restarted_without_its_data_mid_run(
    chaos_workers: Workers, chaos_broker: Any
) -> None:
    """Redis stopped and started again empty (no persistence): messages and bindings
    gone, every connection cut."""
    if rabbitmq():
        pytest.skip("on RabbitMQ the fan-out test's flush is already a restart without data")
    started = time.monotonic()
    watch = Recoveries()
    with Farm() as farm:
        inboxes = farm.inboxes(FAN_OUT)
        # Rows and messages all written before the workers start, so that most
        # messages are still in the broker when it restarts, however fast the workers.
        with override_settings(OUTBOX_INLINE_FANOUT=FAN_OUT):
            outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="restart-empty"))
        chaos_workers.start(2)
        wait_until(lambda: delivered() >= 20, 60, every=0.01)
        at_fault = in_flight()
        queued = watch.lose_messages("restart without data", chaos_broker.restart_empty)
        seconds, recovered = watch.settle(FAN_OUT, started)
        tally = farm.tally(inboxes)
    report(
        "broker restarted without data",
        recovered_seconds=recovered,
        queued_at_fault=queued,
        in_flight_at_fault=at_fault,
        duplicates=tally.duplicates,
        requests=tally.requests,
        seconds=seconds,
    )
    assert queued > 0, "the restart came too late to lose anything"
    assert states() == {DeliveryState.DELIVERED: FAN_OUT}
    assert tally.missing == 0
    assert tally.duplicates <= at_fault
    assert all(s is not None and s <= RECOVERY_BOUND for s in recovered.values()), recovered


@pytest.mark.postgres_only
def test_postgresql_restart_mid_run_costs_a_pause(chaos_workers: Workers) -> None:
    """``pg_ctl restart -m fast`` mid-run: every connection is cut; the same worker
    processes carry on once the server is back, and no live process's claims are taken
    back although every heartbeat went stale meanwhile."""
    live = chaos_workers.start(2)
    pools = pool_pids(live)
    watch = Recoveries()
    started = time.monotonic()
    with Farm(behaviour=LOADED) as farm:
        inboxes = farm.inboxes(FAN_OUT)
        outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="pg-restart"))
        wait_until(lambda: delivered() >= FAN_OUT // 4, 60, every=0.02)
        at_fault = in_flight()
        before = delivered()
        watch.fault("PostgreSQL restart", lambda: int(delivered() <= before))
        down = restart_postgres()
        seconds, recovered = watch.settle(FAN_OUT, started)
        tally = farm.tally(inboxes)
    report(
        "PostgreSQL restart",
        recovered_seconds=recovered,
        restart_seconds=round(down, 1),
        in_flight_at_fault=at_fault,
        duplicates=tally.duplicates,
        requests=tally.requests,
        seconds=seconds,
    )
    assert states() == {DeliveryState.DELIVERED: FAN_OUT}
    assert tally.missing == 0
    assert tally.duplicates <= at_fault
    assert all(w.process.poll() is None for w in live)  # type: ignore[union-attr]
    assert pool_pids(live) == pools, "a pool process was replaced"
    assert all(s is not None and s <= RECOVERY_BOUND for s in recovered.values()), recovered


def test_a_broker_outage_around_send_commits_the_rows_and_the_workers_send_them(
    chaos_workers: Workers, chaos_broker: Any
) -> None:
    """Redis is down while a view sends to 2,000 inboxes: ``send`` returns, the rows
    commit undispatched, nothing is sent; once Redis is back the leading worker's recovery
    pass publishes them and each is sent once."""
    chaos_workers.start(2)
    started = time.monotonic()
    with Farm() as farm:
        inboxes = farm.inboxes(FAN_OUT)
        chaos_broker.stop()
        calling = time.monotonic()
        with override_settings(OUTBOX_INLINE_FANOUT=FAN_OUT), transaction.atomic():
            outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="outage"))
        send_took = time.monotonic() - calling
        rows = Delivery.objects.all()
        assert rows.count() == FAN_OUT
        undispatched = rows.filter(state=DeliveryState.QUEUED, dispatched_at__isnull=True)
        assert undispatched.count() == FAN_OUT
        time.sleep(1)
        assert farm.requests() == 0
        chaos_broker.start()
        back = time.monotonic()
        drive(FAN_OUT, 120)
        tally = farm.tally(inboxes)
    report(
        "broker outage around send",
        send_seconds=round(send_took, 2),
        duplicates=tally.duplicates,
        requests=tally.requests,
        seconds_after_broker_back=round(time.monotonic() - back, 1),
        seconds=round(time.monotonic() - started, 1),
    )
    assert send_took < 30
    assert states() == {DeliveryState.DELIVERED: FAN_OUT}
    assert tally.missing == 0
    assert tally.duplicates == 0  # nothing was in flight at the fault


def test_a_large_fan_out_sent_while_the_broker_is_down_is_expanded_all_the_same(
    chaos_workers: Workers, chaos_broker: Any
) -> None:
    """Past ``OUTBOX_INLINE_FANOUT`` the rows are written by an ``expand`` task; with the
    broker down that task is lost and the message keeps its inbox list.  Once the broker
    is back, the recovery pass runs the expansion: at once if the broker lost its data
    (Redis without persistence: the canary is gone), else once the lane has been empty
    for a heartbeat timeout (RabbitMQ keeps its queues)."""
    chaos_workers.start(1)
    with Farm() as farm:
        inboxes = farm.inboxes(600)
        chaos_broker.stop()
        with transaction.atomic():
            message = outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="outage-expand"))
        assert message is not None
        assert message.pending.exists()
        assert Delivery.objects.count() == 0
        chaos_broker.start()
        seconds = drive(600, 60)
        tally = farm.tally(inboxes)
    report("broker outage around a large send", duplicates=tally.duplicates, seconds=seconds)
    assert states() == {DeliveryState.DELIVERED: 600}
    assert (tally.missing, tally.duplicates) == (0, 0)


def test_sigterm_finishes_in_flight_claims_nothing_more_and_releases_the_rest(
    chaos_workers: Workers,
) -> None:
    """A warm shutdown mid-run: the worker stops claiming, lets what it is sending finish
    for OUTBOX_STOP_TIMEOUT, and gives back at once (not after its lease, nor after its
    heartbeat's timeout) both what it never started and the slow requests still running;
    another worker sends those."""
    stop_timeout = 2
    (worker,) = chaos_workers.start(1, extra={"OUTBOX_STOP_TIMEOUT": stop_timeout})
    started = time.monotonic()
    with Farm() as farm:
        inboxes = farm.inboxes(FAN_OUT)
        slow = inboxes[:8]  # on eight hosts, and in the first slice written
        for server, inbox in zip(farm.servers, slow, strict=False):
            server.behave(urlsplit(inbox).path, Behaviour(delay=12))
        outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="sigterm"))
        wait_until(
            lambda: delivered() >= FAN_OUT // 10 and sum(farm.counts()[i] for i in slow) == 8,
            60,
            every=0.02,
        )
        pools = children(worker.process.pid)
        at_signal = in_flight(pools)
        signalled = time.monotonic()
        worker.process.send_signal(signal.SIGTERM)
        first_seen: dict[int, float] = {}
        pools_gone: float | None = None
        while worker.process.poll() is None:
            now = time.monotonic()
            assert now - signalled < 30, "the worker did not stop"
            if pools_gone is None and not children(worker.process.pid):
                pools_gone = now
            elif pools_gone is not None and now - pools_gone > 5:
                # Celery's main process can wait for good for a message it received
                # as the warm shutdown began (seen in full-suite runs): the pool
                # processes, where the package stops, are gone; end it as a
                # supervisor would.
                print(f"[chaos] SIGTERM: Celery main process still up {now - pools_gone:.0f}s")
                worker.process.kill()
                worker.process.wait()
                break
            for pk in Delivery.objects.filter(state=DeliveryState.SENDING).values_list(
                "pk", flat=True
            ):
                first_seen.setdefault(pk, now)
            time.sleep(0.02)
        stopped_in = (pools_gone or time.monotonic()) - signalled
        # Given back with their attempt refunded: by the worker, not taken back by another.
        left = in_flight(pools)
        slow_rows = Delivery.objects.filter(inbox__in=slow)
        released_slow = slow_rows.filter(state=DeliveryState.QUEUED, attempts=0).count()
        claimed_late = [pk for pk, seen in first_seen.items() if seen > signalled + 1.0]
        for server, inbox in zip(farm.servers, slow, strict=False):
            server.behave(urlsplit(inbox).path, Behaviour())  # answers at once from now on
        chaos_workers.start(1)
        drive(FAN_OUT, 90)
        tally = farm.tally(inboxes)
    report(
        "SIGTERM",
        in_flight_at_signal=at_signal,
        stopped_in=round(stopped_in, 1),
        slow_released=released_slow,
        duplicates=tally.duplicates,
        requests=tally.requests,
        seconds=round(time.monotonic() - started, 1),
    )
    assert stopped_in < stop_timeout + 10
    assert left == 0, "claims left for the lease to lapse"
    assert released_slow == 8, "the slow requests still running were not given back"
    assert not claimed_late, f"{len(claimed_late)} deliveries claimed after the signal"
    assert states() == {DeliveryState.DELIVERED: FAN_OUT}
    assert tally.missing == 0
    assert 8 <= tally.duplicates <= at_signal

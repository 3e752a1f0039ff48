"""Partial failures: an exception or a hang injected at each step of real worker processes.

Each test starts the README's worker (two pool processes) with the package's default
timers on the chaos tests' private broker, with the fault points of
``testproject/faults.py`` installed, arms one fault (it fires once, in whichever process
reaches it first), sends to loopback hosts that count every request, and checks, with no
beat running:

- every delivery is delivered, or queued again with its reason recorded, within
  :data:`BOUND` seconds of the fault, and none is left in ``sending``;
- each inbox received the activity, and no more duplicates than deliveries were being
  sent when the fault struck (all that at-least-once may send twice);
- afterwards the worker is whole: two pool processes beating, every supervised part
  alive and not stuck (a process made unfit by the fault has been replaced).
"""

from __future__ import annotations

import time

import pytest

from django_outbox import Batch, outbox
from django_outbox.models import Delivery, DeliveryState, Heartbeat
from django_outbox.tasks import sweep
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour
from tests.support.chaos import NOTE, Farm, Workers, children, report, states, wait_until
from tests.support.faults import (
    BOUND,
    Faults,
    all_delivered,
    check,
    start,
    whole,
)
from tests.support.rows import ago, delivery, hence, message

# Only the recovery pass's fault involves the broker: the others run once, on Redis.
pytestmark = pytest.mark.django_db(transaction=True)

#: Deliveries per test, over :data:`HOSTS` hosts.
FAN_OUT = 200
HOSTS = 20


def fan_out(farm: Farm, tag: str) -> list[str]:
    inboxes = farm.inboxes(FAN_OUT)
    outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag=tag))
    return inboxes


# -- the task's steps, between the claim and the hand-over --------------------------


@pytest.mark.parametrize(
    ("point", "kind"),
    [
        ("key_resolver", "raise"),
        ("key_resolver", "hang"),
        ("jobs_for", "raise"),
        ("jobs_for", "hang"),
    ],
)
def test_a_fault_while_a_claim_is_prepared(
    chaos_workers: Workers, faults: Faults, redis_url: str, point: str, kind: str
) -> None:
    worker = start(chaos_workers, redis_url)
    faults.arm(point, kind)
    with Farm(HOSTS) as farm:
        inboxes = fan_out(farm, f"{point}-{kind}")
        (firing,) = faults.wait_fired()
        check(f"{point} {kind}", farm, inboxes, firing, worker)


# -- the recorder's steps -------------------------------------------------------------


@pytest.mark.parametrize(
    ("point", "kind"),
    [
        ("signal_receiver", "raise"),
        ("signal_receiver", "hang"),
        ("recorder_save", "raise"),
        ("recorder_save", "hang"),
    ],
)
def test_a_fault_while_outcomes_are_recorded(
    chaos_workers: Workers, faults: Faults, redis_url: str, point: str, kind: str
) -> None:
    worker = start(chaos_workers, redis_url)
    faults.arm(point, kind)
    with Farm(HOSTS) as farm:
        inboxes = fan_out(farm, f"{point}-{kind}")
        (firing,) = faults.wait_fired()
        check(f"{point} {kind}", farm, inboxes, firing, worker)


@pytest.mark.parametrize("kind", ["raise", "hang"])
def test_a_fault_in_the_sender_gone_check(
    chaos_workers: Workers, faults: Faults, redis_url: str, kind: str
) -> None:
    """Hosts that refuse both signature schemes once (401, 401), then accept: each
    delivery's first answer asks the key resolver whether the sender is gone."""
    worker = start(chaos_workers, redis_url)
    faults.arm("gone", kind)
    with Farm(HOSTS, Behaviour(statuses=(401, 401, 202))) as farm:
        inboxes = fan_out(farm, f"gone-{kind}")
        (firing,) = faults.wait_fired()
        check(f"gone {kind}", farm, inboxes, firing, worker, accepted_only=True)
    noted = Delivery.objects.filter(last_error__contains="the sender-gone check failed")
    assert not noted.exclude(state=DeliveryState.DELIVERED).exists()


# -- the leader's recovery pass -------------------------------------------------------


@pytest.mark.broker
def test_a_hung_broker_call_in_the_recovery_pass_hands_the_leadership_on(
    chaos_workers: Workers, faults: Faults, redis_url: str
) -> None:
    worker = start(chaos_workers, redis_url)
    wait_until(lambda: Heartbeat.objects.filter(leader=True).exists(), 30)
    faults.arm("recovery_broker", "hang")
    (firing,) = faults.wait_fired()
    with Farm(HOSTS) as farm:
        # Deliveries whose message never reached the broker: only a recovery pass sends them.
        parent = message()
        inboxes = farm.inboxes(50)
        for inbox in inboxes:
            delivery(parent, inbox=inbox, dispatched_at=None, next_attempt_at=ago(1))
        wait_until(lambda: all_delivered(inboxes), BOUND, every=0.25)
        took = time.time() - firing.at
        report("recovery broker hang", delivered_after=round(took, 1), tally=farm.tally(inboxes))
        assert took <= BOUND
        assert farm.tally(inboxes).duplicates == 0
    stuck = Heartbeat.objects.get(name__contains=f":{firing.pid}:")
    assert not stuck.can_lead and not stuck.leader
    assert stuck.parts["recovery pass"]["stuck"]
    # Its row says it leads from the beat after it learnt it does.
    wait_until(lambda: Heartbeat.objects.filter(leader=True).exclude(pk=stuck.pk).exists(), 10)
    pool = children(worker.pid)
    assert firing.pid in pool and len(pool) == 2, "a stuck pass costs the leadership only"


# -- the sweeper's steps --------------------------------------------------------------


def sweep_scene() -> tuple[Delivery, str]:
    """An expired delivery and a long-dead heartbeat row, for a sweep to clear."""
    expired = delivery(message(deadline=ago(1)), next_attempt_at=hence(3600))
    Heartbeat.objects.create(name="gone:1:000000000000", beat_at=ago(7200))
    return expired, "gone:1:000000000000"


#: ``OUTBOX_PAYMENTS`` that turns paid push on, whose sweep step is an extension's: the
#: node is never asked (the step raises first).
PAYMENTS_ON = {
    "CLIENT": "django_outbox.payments.clients.lnd.LndRestClient",
    "OPTIONS": {"url": "https://127.0.0.1:1", "macaroon_hex": "00" * 32},
    "NETWORK": "bcrt",
}


@pytest.mark.parametrize("step", ["expired", "dispatched", "payments", "signals"])
def test_a_sweeper_step_that_raises_leaves_the_others_to_run(
    chaos_workers: Workers, faults: Faults, redis_url: str, step: str
) -> None:
    extra = {"OUTBOX_PAYMENTS": PAYMENTS_ON} if step == "payments" else {}
    worker = start(chaos_workers, redis_url, **extra)
    wait_until(lambda: whole(worker), 60, every=0.5)
    pool = set(children(worker.pid))
    expired, dead = sweep_scene()
    faults.arm(f"sweep:{step}", "raise")
    sweep.apply_async(queue="outbox")
    faults.wait_fired()
    wait_until(lambda: not Heartbeat.objects.filter(name=dead).exists(), BOUND)
    state = Delivery.objects.get(pk=expired.pk).state
    assert state == (DeliveryState.QUEUED if step == "expired" else DeliveryState.FAILED)
    # Whole, and by the same processes: a step that raises ends no process.  (Under
    # load a beat may come late, or a loop's turn look stuck for a moment: wait.)
    wait_until(lambda: whole(worker), 60, every=0.5)
    assert set(children(worker.pid)) == pool


def test_a_sweeper_step_that_hangs_costs_the_process_only_its_sweep(
    chaos_workers: Workers, faults: Faults, redis_url: str
) -> None:
    worker = start(chaos_workers, redis_url)
    expired, dead = sweep_scene()
    faults.arm("sweep:dispatched", "hang")
    sweep.apply_async(queue="outbox")
    (firing,) = faults.wait_fired()
    with Farm(HOSTS) as farm:
        inboxes = fan_out(farm, "sweep-hang")
        check("sweep hang", farm, inboxes, firing, worker, settled=all_delivered)
    sweep.apply_async(queue="outbox")
    wait_until(lambda: not Heartbeat.objects.filter(name=dead).exists(), BOUND)
    assert Delivery.objects.get(pk=expired.pk).state == DeliveryState.FAILED
    report("sweep hang", states=dict(states()))

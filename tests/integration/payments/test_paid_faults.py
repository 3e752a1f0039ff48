"""Paid push when a destination or the node misbehaves, with real worker processes.

A hostile invoice beside healthy hosts (the README's worker and settings), an invoice
served again after a failed payment or after it was paid, and a node so slow that
each call takes seconds beside hosts that charge nothing.  The workers run on the
chaos tests' private broker; no beat runs.
"""

from __future__ import annotations

import time

import pytest

from django_outbox import outbox
from django_outbox.models import Delivery, DeliveryState
from django_outbox.payments.models import PaymentAttempt, PaymentHost
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import Behaviour, InboxServer, ServerFarm
from testproject.lightning.l402_inbox import L402Gate, Mode
from tests.integration.payments.network import PRICE, Lightning, Start, finished, send, states
from tests.support.chaos import NOTE, Farm, Workers, none_live, report, wait_until
from tests.support.faults import BOUND, Faults, check, start

#: Deliveries to free hosts beside the paid ones in the ledger test, over ``HOSTS`` hosts.
FAN_OUT = 200
HOSTS = 20

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: Seconds the slow node takes to answer each call.
SLOW_NODE = 15.0


def test_a_hostile_invoice_beside_healthy_hosts_refuses_only_its_delivery(
    chaos_workers: Workers, lightning: Lightning
) -> None:
    """Issue 21's run: a ``402`` whose invoice expires after 10^12 s, beside 50 healthy
    hosts, the README's worker (two pool processes) and the default timers.  Before the
    bounds, both recorders died at the first such 402 and nothing was recorded."""
    chaos_workers.start(1, {"OUTBOX_PAYMENTS": lightning.settings()})
    hostile = lightning.issuer.challenge(PRICE, expiry=10**12).header
    charges = Behaviour(statuses=(402,), headers={"WWW-Authenticate": hostile})
    with Farm(hosts=50) as farm, InboxServer(behaviour=charges) as server:
        healthy = farm.inboxes(300)
        charging = [server.url(f"/users/{n}/inbox") for n in range(6)]
        sent = time.monotonic()
        outbox.send(ACTOR, NOTE, healthy + charging)
        wait_until(lambda: none_live(306), 60)
        seconds = round(time.monotonic() - sent, 1)
        tally = farm.tally(healthy)
        asked = len(server.requests())
    assert states(_ids(healthy)) == [DeliveryState.DELIVERED] * 300
    assert (tally.missing, tally.duplicates) == (0, 0)
    refused = Delivery.objects.filter(inbox__in=charging)
    assert {row.state for row in refused} == {DeliveryState.REFUSED}
    for row in refused:
        assert row.last_error.startswith("payment refused: expiry_too_long"), row.last_error
    assert not PaymentAttempt.objects.exists()
    assert lightning.node.attempts == []
    assert asked == 6  # one request each: a refusal is final
    report("hostile invoice", healthy=len(healthy), refused=refused.count(), seconds=seconds)


def test_an_invoice_served_again_is_paid_again_after_a_failure_and_refused_once_paid(
    start: Start, lightning: Lightning
) -> None:
    start()
    lightning.node.fail_next("no_route")
    with lightning.inbox(repeat_invoice=True) as inbox:
        [again] = send(inbox.url())
        wait_until(lambda: finished([again]), 60)
        challenged = inbox.gate.decisions.count("challenged")
    assert states([again]) == [DeliveryState.DELIVERED]
    assert [a.status for a in lightning.node.attempts] == ["failed", "complete"]
    assert challenged == 2  # the same invoice both times
    reopened = PaymentAttempt.objects.get()
    assert (reopened.state, reopened.delivery_id) == ("used", again)

    with lightning.inbox(mode=Mode.PER_MESSAGE, repeat_invoice=True) as inbox:
        [first] = send(inbox.url("/a"))
        wait_until(lambda: finished([first]), 60)
        [second] = send(inbox.url("/b"))
        wait_until(lambda: finished([second]), 60)
    assert states([first, second]) == [DeliveryState.DELIVERED, DeliveryState.REFUSED]
    row = Delivery.objects.get(pk=second)
    assert row.last_error.startswith("payment refused: invoice_already_paid"), row.last_error
    assert len(lightning.node.payments()) == 2  # one for each inbox, none more


def test_a_slow_node_delays_only_payments(start: Start, lightning: Lightning) -> None:
    """Eight hosts charging per message, each of the node's calls taking 15 s, in one
    pool process; meanwhile deliveries to twenty new hosts that charge nothing go out
    on their first attempt, all of them before the node has answered a single call."""
    start(timeout=4 * SLOW_NODE)
    gate = L402Gate(lightning.issuer, mode=Mode.PER_MESSAGE, price_msat=PRICE)
    paid_farm = ServerFarm(8, behaviour=Behaviour(gate=gate), first_address="127.0.4.2")
    with paid_farm, Farm(hosts=20) as farm:
        lightning.lnd.delay = SLOW_NODE
        paid = send(*(server.url("/inbox") for server in paid_farm.servers))
        wait_until(lambda: lightning.lnd.in_flight >= 6, 60)  # the payments are at the node
        answered, sent = len(lightning.lnd.calls), time.monotonic()
        free = send(*farm.inboxes(40))
        wait_until(lambda: finished(free), 4 * SLOW_NODE)
        seconds = round(time.monotonic() - sent, 1)
        answered_meanwhile = len(lightning.lnd.calls) - answered
        at_the_node = lightning.lnd.in_flight
        lightning.lnd.delay = 0.0
        wait_until(lambda: finished(paid), 6 * SLOW_NODE)
    rows = Delivery.objects.filter(id__in=free)
    assert {(row.state, row.attempts, row.last_error) for row in rows} == {
        (DeliveryState.DELIVERED, 1, "")
    }
    assert answered_meanwhile == 0, "a free delivery waited for the node"
    assert states(paid) == [DeliveryState.DELIVERED] * 8
    assert len(lightning.node.payments()) == 8
    report("slow node", free=len(free), free_seconds=seconds, node_calls_in_flight=at_the_node)


def _ids(inboxes: list[str]) -> list[int]:
    rows = Delivery.objects.filter(inbox__in=inboxes).order_by("id")
    return list(rows.values_list("id", flat=True))


@pytest.mark.parametrize("kind", ["raise", "hang"])
def test_a_fault_in_the_ledger_while_outcomes_are_recorded(
    chaos_workers: Workers, lightning: Lightning, faults: Faults, redis_url: str, kind: str
) -> None:
    """The ledger (``record_payments``, the recorder's first step with payments on) raises
    or hangs once, in whichever pool process records first: free hosts and a host that
    charges per message all get their delivery, each paid host exactly once."""
    worker = start(chaos_workers, redis_url, OUTBOX_PAYMENTS=lightning.settings())
    faults.arm("ledger", kind)
    with Farm(HOSTS) as farm, lightning.inbox(mode=Mode.PER_MESSAGE) as paid:
        free = farm.inboxes(FAN_OUT)
        charging = [paid.url(f"/users/{n}/inbox") for n in range(3)]
        outbox.send(ACTOR, NOTE, free + charging)
        (firing,) = faults.wait_fired()
        check(f"ledger {kind}", farm, free, firing, worker)
        wait_until(lambda: finished(_ids(charging)), BOUND + 30)
    assert states(_ids(charging)) == [DeliveryState.DELIVERED] * 3
    assert len(lightning.node.payments()) == 3, "each paid delivery paid once"


#: Seconds an armed hang holds one delivery's store of its payment.
STORE_HANG = 20.0


@pytest.mark.parametrize("kind", ["raise", "hang"])
def test_a_fault_storing_a_payment_in_the_attempt_that_met_the_402(
    chaos_workers: Workers, lightning: Lightning, faults: Faults, redis_url: str, kind: str
) -> None:
    """Storing the challenge of a per-message host's 402 (the attempt's own store, before
    it pays) raises or hangs once: that delivery alone waits, nothing is paid for it
    until its attempt is stored, and every delivery is paid exactly once."""
    worker = start(chaos_workers, redis_url, OUTBOX_PAYMENTS=lightning.settings())
    faults.arm("store_payment", kind, seconds=STORE_HANG)
    with Farm(HOSTS) as farm, lightning.inbox(mode=Mode.PER_MESSAGE) as paid:
        PaymentHost.objects.create(host=paid.host, per_message=True)
        free = farm.inboxes(FAN_OUT)
        charging = [paid.url(f"/users/{n}/inbox") for n in range(6)]
        outbox.send(ACTOR, NOTE, free + charging)
        (firing,) = faults.wait_fired()
        # The others are paid while the one store hangs.
        wait_until(lambda: len(lightning.node.payments()) >= 5, BOUND)
        if kind == "hang":
            assert time.time() < firing.at + STORE_HANG, "the others did not wait for it"
        check(f"store_payment {kind}", farm, free, firing, worker)
        wait_until(lambda: finished(_ids(charging)), BOUND + STORE_HANG)
    assert states(_ids(charging)) == [DeliveryState.DELIVERED] * 6
    assert len(lightning.node.payments()) == 6, "each paid delivery paid once"
    per_delivery = PaymentAttempt.objects.filter(paid_at__isnull=False)
    assert sorted(per_delivery.values_list("delivery_id", flat=True)) == _ids(charging)

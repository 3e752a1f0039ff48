"""Paying as fast as hosts charge, with real worker processes (PostgreSQL or SQLite, Redis).

A host that charges per message is paid several deliveries at once, by two worker
processes, and a SIGKILL of one while its payments are under way costs no second
payment: each delivery is paid once, no invoice paid already is paid again.  A host
that sells tokens is paid once however many deliveries wait for it: they are released
when its token is bought.  The fake LND and the L402 inboxes run in this process
(tests/integration/payments/network.py), so every payment is counted where it happens.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from django_outbox.models import DeliveryState
from django_outbox.payments.models import PaymentAttempt, PaymentHost
from testproject.lightning.l402_inbox import Mode
from testproject.lightning.node import FakeNode, NodePayment, Refused
from tests.integration.payments.network import Lightning, Start, finished, send, states
from tests.support.chaos import busiest, kill, pool_pids, report, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: Seconds the node takes to answer a payment it made, while the test kills a worker.
HANG = 20.0


def refusals(node: FakeNode) -> list[str]:
    """The kinds of every payment the node refuses from now on (``"paid"``: an invoice
    paid already was asked to be paid again)."""
    refused: list[str] = []
    pay = node.pay

    def counted(invoice: str, amount_msat: int | None, max_fee_msat: int) -> NodePayment:
        try:
            return pay(invoice, amount_msat, max_fee_msat)
        except Refused as refusal:
            refused.append(refusal.kind)
            raise

    node.pay = counted  # type: ignore[method-assign]
    return refused


def test_two_processes_pay_a_per_message_host_in_parallel_and_a_kill_pays_nothing_twice(
    start: Start, lightning: Lightning
) -> None:
    """SIGKILL of one of two processes while several payments to one host are under
    way (the node has paid and not yet answered): every delivery ends delivered, each
    paid exactly once, and no paid invoice is asked to be paid again."""
    live = start(2, timeout=HANG + 10)  # the client outwaits the node; within the lease
    refused = refusals(lightning.node)
    with lightning.inbox(mode=Mode.PER_MESSAGE) as inbox:
        first = send(*(inbox.url(f"/first/{n}") for n in range(4)))
        wait_until(lambda: finished(first), 60)
        assert PaymentHost.objects.get(host=inbox.host).per_message, "learnt from its 402s"
        lightning.lnd.hang_after_paying = HANG
        ids = send(*(inbox.url(f"/users/{n}/inbox") for n in range(24)))
        wait_until(lambda: lightning.lnd.in_flight >= 2, 30)
        parallel = lightning.lnd.in_flight
        kill([busiest(pool_pids(live))])
        lightning.lnd.hang_after_paying = 0.0
        wait_until(lambda: finished(ids), 180)
        accepted = inbox.gate.decisions.count("accepted")
    assert set(states(first + ids)) == {DeliveryState.DELIVERED}
    paid = PaymentAttempt.objects.filter(paid_at__isnull=False)
    per_delivery = Counter(paid.values_list("delivery_id", flat=True))
    assert per_delivery == Counter(first + ids), "one payment per delivery"
    assert len(lightning.node.payments()) == len(first + ids)
    assert refused.count("paid") == 0, "no invoice paid already was paid again"
    assert accepted == len(first + ids)
    report("paid-push parallel sigkill", in_flight=parallel, payments=len(per_delivery))


def test_a_host_selling_tokens_is_paid_once_for_many_queued_deliveries(
    start: Start, lightning: Lightning
) -> None:
    """Sixty deliveries to one token-selling host at once, two processes: one payment;
    the deliveries held meanwhile are released when the token is bought and take it."""
    start(2)
    refused = refusals(lightning.node)
    began = time.monotonic()
    with lightning.inbox(mode=Mode.PER_TOKEN) as inbox:
        ids = send(*(inbox.url(f"/users/{n}/inbox") for n in range(60)))
        wait_until(lambda: finished(ids), 120)
        decisions = list(inbox.gate.decisions)
    took = time.monotonic() - began
    assert set(states(ids)) == {DeliveryState.DELIVERED}
    assert len(lightning.node.attempts) == 1
    token = PaymentAttempt.objects.get()
    assert (token.state, token.uses) == ("used", 60)
    assert PaymentHost.objects.get(host=inbox.host).per_message is False
    assert refused == []
    report(
        "paid-push token host, 60 queued",
        seconds=round(took, 1),
        requests=len(decisions),
        challenged=decisions.count("challenged"),
    )

"""Paid push with real worker processes, PostgreSQL, Redis and Celery.

The destinations are L402 inboxes in this process; the workers pay them through a
fake LND (also in this process) on the same invoice registry, so every payment is a
real invoice settled once, counted where it happens (``node.attempts``).  The
workers run on the chaos tests' private broker, so that one can be SIGKILLed
(tests/integration/payments/network.py and conftest.py).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from django_outbox.payments.models import PaymentAttempt
from testproject.demo.models import SignalLog
from testproject.inbox_servers import Behaviour, InboxServer
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import Mode
from tests.integration.payments.network import (
    PRICE,
    Lightning,
    Start,
    finished,
    send,
    states,
)
from tests.support.chaos import busiest, kill, pool_pids, report, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_worker_killed_after_paying_and_before_sending_pays_once(
    start: Start, lightning: Lightning
) -> None:
    """SIGKILL while the node's answer to ``pay`` is on its way: the retry asks the node,
    reuses the preimage, and pays nothing more."""
    live = start(timeout=70)  # a client that outwaits the node; within the lease (E017)
    lightning.lnd.hang_after_paying = 60.0
    with lightning.inbox() as inbox:
        ids = send(inbox.url())
        wait_until(lambda: len(lightning.node.payments()) == 1, 30)
        victim = busiest(pool_pids(live))
        kill([victim])
        lightning.lnd.hang_after_paying = 0.0
        wait_until(lambda: finished(ids), 60)
        decisions = list(inbox.gate.decisions)
    assert states(ids) == [DeliveryState.DELIVERED]
    assert len(lightning.node.attempts) == 1
    attempt = PaymentAttempt.objects.get()
    assert (attempt.state, attempt.amount_msat, attempt.uses) == ("used", PRICE, 1)
    assert decisions.count("accepted") == 1
    report("paid-push sigkill", payments=len(lightning.node.attempts), decisions=decisions)


def test_a_client_that_times_out_after_paying_pays_once(start: Start, lightning: Lightning) -> None:
    start(timeout=1.0)
    lightning.lnd.hang_after_paying = 3.0
    with lightning.inbox() as inbox:
        ids = send(inbox.url())
        wait_until(lambda: len(lightning.node.payments()) == 1, 30)
        wait_until(lambda: finished(ids), 60)
    assert states(ids) == [DeliveryState.DELIVERED]
    assert len(lightning.node.attempts) == 1
    row = Delivery.objects.get()
    assert row.attempts == 2  # the timed-out attempt was spent; the retry delivered
    assert PaymentAttempt.objects.get().state == "used"
    logged = SignalLog.objects.filter(signal="settled").values_list("amount_msat", flat=True)
    assert list(logged) == [PRICE]
    assert SignalLog.objects.filter(signal="payment_made", amount_msat=PRICE).count() == 1


def test_two_workers_on_one_hosts_402_pay_once_and_keep_the_token(
    start: Start, lightning: Lightning
) -> None:
    start(2)
    with lightning.inbox(mode=Mode.PER_TOKEN) as inbox:
        ids = send(*(inbox.url(f"/users/{n}/inbox") for n in range(20)))
        wait_until(lambda: finished(ids), 60)
        again = send(*(inbox.url(f"/users/{n}/inbox2") for n in range(5)))
        wait_until(lambda: finished(again), 60)
        decisions = list(inbox.gate.decisions)
    assert set(states(ids + again)) == {DeliveryState.DELIVERED}
    assert len(lightning.node.attempts) == 1
    token = PaymentAttempt.objects.get()
    assert token.state == "used"
    assert token.uses == 25
    challenged = decisions.count("challenged")
    report("paid-push two workers", requests=len(decisions), challenged=challenged)


def test_a_host_that_charges_per_message_is_paid_for_each(
    start: Start, lightning: Lightning
) -> None:
    start(2)
    with lightning.inbox(mode=Mode.PER_MESSAGE, price_msat=None) as inbox:
        ids = send(*(inbox.url(f"/users/{n}/inbox") for n in range(6)))
        wait_until(lambda: finished(ids), 90)
    assert set(states(ids)) == {DeliveryState.DELIVERED}
    assert len(lightning.node.payments()) == 6
    assert len(lightning.node.attempts) == 6
    size = len(Delivery.objects.select_related("message").first().message.body)  # type: ignore[union-attr]
    amounts = set(PaymentAttempt.objects.values_list("amount_msat", flat=True))
    assert amounts == {max(1000, size * 100)}  # amountless invoices: size x rate


def _mismatched(issuer: InvoiceIssuer) -> str:
    challenge = issuer.challenge(PRICE)
    return challenge.header.replace(challenge.invoice.invoice, issuer.invoice(PRICE).invoice)


def test_bad_invoices_are_refused_without_paying(start: Start, lightning: Lightning) -> None:
    start()
    issuer, registry = lightning.issuer, lightning.registry
    headers = {
        "invoice_expired": issuer.challenge(PRICE, expiry=5).header,
        "over_price": issuer.challenge(60_000).header,
        "wrong_network": InvoiceIssuer(registry, network="tb").challenge(PRICE).header,
        "hash_mismatch": _mismatched(issuer),
        "malformed": 'L402 macaroon="abc"',
    }
    with InboxServer() as server:
        for reason, header in headers.items():
            behaviour = Behaviour(statuses=(402,), headers={"WWW-Authenticate": header})
            server.behave(f"/{reason}", behaviour)
        ids = send(*(server.url(f"/{reason}") for reason in headers))
        wait_until(lambda: finished(ids), 60)
        requests = len(server.requests())
    rows = Delivery.objects.filter(id__in=ids).order_by("id")
    for reason, row in zip(headers, rows, strict=True):
        assert row.state == DeliveryState.REFUSED
        assert row.last_error.startswith(f"payment refused: {reason}"), row.last_error
    assert lightning.node.attempts == []
    assert not PaymentAttempt.objects.exists()
    assert requests == len(headers)  # one request each: never a loop


def test_over_budget_deliveries_are_held_and_the_application_told(
    start: Start, lightning: Lightning
) -> None:
    start(DAILY_BUDGET_MSAT=PRICE + 100)
    with lightning.inbox(mode=Mode.PER_MESSAGE) as inbox:
        ids = send(inbox.url("/a"), inbox.url("/b"))
        wait_until(lambda: len(lightning.node.payments()) == 1, 30)
        tomorrow = timezone.now().date() + timedelta(days=1)
        midnight = datetime.combine(tomorrow, datetime.min.time(), tzinfo=UTC)  # next UTC day
        wait_until(
            lambda: Delivery.objects.filter(
                id__in=ids, state=DeliveryState.QUEUED, next_attempt_at__gte=midnight
            ).exists(),
            30,
        )
        wait_until(lambda: Delivery.objects.filter(state=DeliveryState.DELIVERED).exists(), 30)
    held = Delivery.objects.get(state=DeliveryState.QUEUED)
    assert held.last_error.startswith("held: paying")
    assert held.attempts == 0
    assert len(lightning.node.attempts) == 1
    told = SignalLog.objects.filter(signal="budget_exceeded")
    assert told.exists()
    assert {log.delivery_id for log in told} == {held.pk}


def test_a_destination_that_never_accepts_a_paid_token_is_capped(
    start: Start, lightning: Lightning
) -> None:
    start(MAX_PAYMENTS_PER_DELIVERY=2)
    with lightning.inbox() as inbox:
        inbox.gate._refusal = lambda value: "never"  # type: ignore[method-assign]
        ids = send(inbox.url())
        wait_until(lambda: finished(ids), 60)
        time.sleep(1.0)  # nothing more is paid afterwards
    row = Delivery.objects.get()
    assert row.state == DeliveryState.REFUSED
    assert "paid 2 times" in row.last_error
    assert len(lightning.node.attempts) == 2
    assert list(PaymentAttempt.objects.values_list("state", flat=True)) == ["failed", "failed"]
    assert SignalLog.objects.filter(signal="payment_failed").count() == 2

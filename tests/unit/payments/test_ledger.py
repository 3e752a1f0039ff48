"""Paid push through the worker's own steps on SQLite: claim, send, record.

Each round claims the delivery, builds its job (``jobs_for``: the open attempt and the
host's kept token), sends it with the real transport to an L402 inbox on loopback,
pays with the fake LND, and records the outcome (ledger, then the delivery's state).
No Celery, no Redis: what a worker does between two broker messages, by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date, timedelta
from typing import Any

import pytest
from django.dispatch import Signal
from django.test import override_settings
from django.utils import timezone

from django_outbox.models import Attempt, Delivery, DeliveryState
from django_outbox.payments import paying
from django_outbox.payments.lookups import claim_lookup, spent_today
from django_outbox.payments.models import PaymentAttempt, PaymentBudget, PaymentHost
from django_outbox.payments.reports import BOUGHT_MEANWHILE, MET_402_LATELY
from django_outbox.payments.signals import payment_budget_exceeded, payment_failed, payment_made
from django_outbox.signals import delivery_settled
from testproject.demo.keys import ACTOR
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402Gate, L402InboxServer, Mode
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode
from tests.support.payment_rounds import (
    PRICE,
    attempted,
    payments,
    recorded,
    round_of,
    send,
    serve,
    state,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_caches")]


Catch = Callable[[Signal], list[dict[str, Any]]]


@pytest.fixture
def caught() -> Iterator[Catch]:
    """``caught(signal)``: the arguments of each sending of ``signal`` during the test."""
    connected: list[tuple[Signal, Callable[..., None]]] = []

    def catch(signal: Signal) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []

        def receiver(sender: object, **kwargs: Any) -> None:
            seen.append(kwargs)

        signal.connect(receiver, weak=False)
        connected.append((signal, receiver))
        return seen

    yield catch
    for signal, receiver in connected:
        signal.disconnect(receiver)


@pytest.mark.usefixtures("configured")
def test_a_402_is_stored_then_paid_once_then_delivered(
    inbox: L402InboxServer, node: FakeNode, caught: Catch
) -> None:
    made, settled = caught(payment_made), caught(delivery_settled)
    [pk] = send(inbox.url())
    [first] = round_of([pk])
    assert first.result == "paying"
    attempt = PaymentAttempt.objects.get()
    assert (attempt.state, attempt.amount_msat, attempt.delivery_id) == ("pending", PRICE, pk)
    assert spent_today(ACTOR) == PRICE + 100  # price and the most fee, reserved
    assert node.attempts == []  # stored first, paid at the next claim
    assert Delivery.objects.get(pk=pk).attempts == 0  # a 402 spends no attempt
    [second] = round_of([pk])
    assert second.result == "delivered"
    attempt.refresh_from_db()
    assert (attempt.state, attempt.uses, attempt.fee_msat) == ("used", 1, 0)
    assert len(attempt.preimage) == 64
    assert spent_today(ACTOR) == PRICE  # the unused fee allowance given back
    assert len(node.payments()) == 1
    assert state(pk) == DeliveryState.DELIVERED
    assert [s["amount_msat"] for s in settled] == [PRICE]
    assert [(m["amount_msat"], m["payment_hash"]) for m in made] == [(PRICE, attempt.payment_hash)]
    assert attempt.preimage not in repr(made) + repr(attempt) + str(attempt)
    assert attempt.macaroon not in repr(made) + repr(attempt)


@pytest.mark.usefixtures("configured")
def test_a_kept_token_opens_the_host_again_without_paying(
    inbox: L402InboxServer, node: FakeNode
) -> None:
    [first] = send(inbox.url("/a"))
    round_of([first])
    round_of([first])
    token = claim_lookup([], [inbox.host]).tokens[inbox.host]
    [second] = send(inbox.url("/b"))
    [outcome] = round_of([second])
    assert outcome.result == "delivered"
    assert outcome.report is not None and outcome.report.paid_msat == 0
    assert PaymentAttempt.objects.get(pk=token.attempt_id).uses == 2
    assert len(node.payments()) == 1
    assert token.preimage not in repr(token)


@pytest.mark.django_db(transaction=True)  # the third pays at once, on a payment thread
@pytest.mark.usefixtures("configured")
def test_a_host_that_charges_per_message_is_paid_each_time(
    issuer: InvoiceIssuer, node: FakeNode
) -> None:
    server = serve(issuer, mode=Mode.PER_MESSAGE)
    try:
        for n in range(3):
            [pk] = send(server.url(f"/{n}"))
            for _ in range(3):
                round_of([pk])
            assert state(pk) == DeliveryState.DELIVERED
    finally:
        server.stop()
    assert len(node.payments()) == 3
    rows = PaymentAttempt.objects.order_by("id")
    assert [row.state for row in rows] == ["used"] * 3
    # The first token was refused by the second delivery: the host charges per message,
    # and the tokens bought after that are retired as they are used.
    assert [row.retired_at is not None for row in rows] == [True, True, True]
    assert PaymentHost.objects.get().per_message


@pytest.mark.usefixtures("configured")
def test_two_deliveries_meeting_a_402_at_once_pay_once(
    inbox: L402InboxServer, node: FakeNode
) -> None:
    first, other = send(inbox.url("/a"), inbox.url("/b"))
    outcomes = round_of([first, other])
    assert [(o.row.id, o.result) for o in outcomes] == [(first, "paying")]
    # Held without a request, then parked by the recorder: no history row.
    parked = Delivery.objects.get(pk=other)
    assert (parked.state, parked.last_error, parked.attempts) == ("queued", MET_402_LATELY, 0)
    assert not Attempt.objects.filter(delivery_id=other).exists()
    assert PaymentAttempt.objects.count() == 1
    ids = [first, other]
    for _ in range(3):
        round_of(ids)
    assert {state(pk) for pk in ids} == {DeliveryState.DELIVERED}
    assert len(node.payments()) == 1  # the second used the first's token


@pytest.mark.usefixtures("configured")
def test_a_402_met_while_another_delivery_bought_a_token_tries_that_token(
    inbox: L402InboxServer, node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker sent ``late`` before any payment began and records its 402 after
    that payment was made and its token used: ``late`` waits for the token, pays nothing."""
    first, late = send(inbox.url("/a"), inbox.url("/b"))
    [challenged] = attempted([late])
    assert challenged.result == "paying"
    monkeypatch.setattr(paying, "_challenged", {})  # the other worker's process
    round_of([first])
    round_of([first])
    assert state(first) == DeliveryState.DELIVERED
    assert recorded([challenged]) == []  # parked, to try that token
    assert Delivery.objects.get(pk=late).last_error == BOUGHT_MEANWHILE
    assert PaymentAttempt.objects.count() == 1
    [outcome] = round_of([late])
    assert outcome.result == "delivered"
    assert len(node.payments()) == 1
    assert PaymentAttempt.objects.get().uses == 2


def test_over_the_daily_budget_deliveries_are_held_and_told(
    lnd: FakeLndServer, inbox: L402InboxServer, node: FakeNode, caught: Catch
) -> None:
    told = caught(payment_budget_exceeded)
    with override_settings(OUTBOX_PAYMENTS=payments(lnd, DAILY_BUDGET_MSAT=PRICE + 50)):
        [pk] = send(inbox.url())
        [outcome] = round_of([pk])
    assert outcome.result == "held"
    row = Delivery.objects.get(pk=pk)
    assert row.state == DeliveryState.QUEUED
    assert row.attempts == 0
    tomorrow = timezone.now().date() + timedelta(days=1)
    assert row.next_attempt_at.date() == tomorrow
    assert not PaymentAttempt.objects.exists()
    assert node.attempts == []
    assert [(t["actor"], t["amount_msat"], t["budget_msat"]) for t in told] == [
        (ACTOR, PRICE, PRICE + 50)
    ]
    assert isinstance(told[0]["day"], date)
    assert told[0]["delivery"].pk == pk


def test_a_destination_that_takes_money_and_never_accepts_is_capped(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode, caught: Catch
) -> None:
    failed = caught(payment_failed)
    gate = L402Gate(issuer, price_msat=PRICE)
    gate._refusal = lambda value: "never"  # type: ignore[method-assign]
    server = L402InboxServer(gate).start()
    try:
        with override_settings(OUTBOX_PAYMENTS=payments(lnd, MAX_PAYMENTS_PER_DELIVERY=2)):
            [pk] = send(server.url())
            for _ in range(8):
                round_of([pk])
    finally:
        server.stop()
    row = Delivery.objects.get(pk=pk)
    assert row.state == DeliveryState.REFUSED
    assert "paid 2 times" in row.last_error
    assert len(node.payments()) == 2
    assert [a.state for a in PaymentAttempt.objects.all()] == ["failed", "failed"]
    assert [f["paid"] for f in failed] == [True, True]
    assert spent_today(ACTOR) == 2 * PRICE  # rejected after paying: the money is gone


@pytest.mark.usefixtures("configured")
def test_a_failed_payment_gives_its_budget_back(inbox: L402InboxServer, node: FakeNode) -> None:
    [pk] = send(inbox.url())
    round_of([pk])
    node.fail_next("no_route")
    [outcome] = round_of([pk])
    assert outcome.result == "retry"
    attempt = PaymentAttempt.objects.get()
    assert attempt.state == "failed"
    assert attempt.paid_at is None
    assert spent_today(ACTOR) == 0
    assert claim_lookup([pk], []).attempts == {}
    assert Delivery.objects.get(pk=pk).attempts == 1


@pytest.mark.usefixtures("configured")
def test_a_refused_invoice_refuses_the_delivery_with_the_reason(
    issuer: InvoiceIssuer, node: FakeNode
) -> None:
    server = serve(issuer, invoice_expiry=5)
    try:
        [pk] = send(server.url())
        round_of([pk])
    finally:
        server.stop()
    row = Delivery.objects.get(pk=pk)
    assert row.state == DeliveryState.REFUSED
    assert row.last_error.startswith("payment refused: invoice_expired")
    assert not PaymentAttempt.objects.exists()
    assert node.attempts == []


def test_without_payments_a_402_is_an_answer_like_any_other(
    inbox: L402InboxServer, node: FakeNode
) -> None:
    [pk] = send(inbox.url())
    [outcome] = round_of([pk])
    assert outcome.status == 402
    assert outcome.report is None
    assert state(pk) == DeliveryState.REFUSED
    assert not PaymentBudget.objects.exists()


def test_the_sweeper_settles_payments_of_finished_deliveries_by_asking(
    two_orphans: list[PaymentAttempt], node: FakeNode
) -> None:
    from django_outbox.conf import conf
    from django_outbox.payments.recovery import resolve_orphans

    assert conf.PAYMENTS is not None
    assert resolve_orphans(conf.PAYMENTS) == 0  # left to their deliveries' workers a while
    assert resolve_orphans(conf.PAYMENTS, grace=0) == 2
    paid, unpaid = PaymentAttempt.objects.order_by("id")
    assert (paid.state, len(paid.preimage)) == ("paid", 64)
    assert unpaid.state == "failed"
    assert spent_today(ACTOR) == PRICE
    assert len(node.attempts) == 1


def test_core_lightning_pays_through_the_same_flow(
    cln: Any, inbox: L402InboxServer, node: FakeNode
) -> None:
    setting = {
        "CLIENT": "django_outbox.payments.clients.cln.ClnClient",
        "OPTIONS": {"rpc_path": cln.path, "timeout": 5, "retry_for": 2},
        "NETWORK": "bcrt",
        "MAX_FEE_MSAT": 100,
    }
    with override_settings(OUTBOX_PAYMENTS=setting):
        [pk] = send(inbox.url())
        results = [outcome.result for _ in range(3) for outcome in round_of([pk])]
    assert results[:2] == ["paying", "delivered"]
    assert state(pk) == DeliveryState.DELIVERED
    assert len(node.payments()) == 1
    assert PaymentAttempt.objects.get().state == "used"


def test_payment_records_are_pruned_with_their_delivery_never_pending(
    inbox: L402InboxServer, issuer: InvoiceIssuer, lnd: FakeLndServer
) -> None:
    from django_outbox.payments.ledger import prune

    with override_settings(OUTBOX_PAYMENTS=payments(lnd)):
        [pk] = send(inbox.url())
        round_of([pk])
        round_of([pk])
        other = L402InboxServer(L402Gate(issuer, price_msat=PRICE), "127.0.0.6").start()
        try:
            [pending_pk] = send(other.url())
            round_of([pending_pk])
        finally:
            other.stop()
    old = timezone.now() - timedelta(days=30)
    PaymentAttempt.objects.update(created_at=old)
    PaymentBudget.objects.update(day=old.date())
    assert prune(14 * 86400) == 0  # their deliveries are still there
    Delivery.objects.all().delete()
    assert prune(14 * 86400) == 1
    assert list(PaymentAttempt.objects.values_list("state", flat=True)) == ["pending"]
    assert not PaymentBudget.objects.exists()

"""An invoice a host serves again: paid again if it failed unpaid, else refused or held.

The unique payment hash refuses a second row for one invoice; what the ledger does
then is decided by what is stored, never by the constraint's error alone.  Rounds of
claim, send and record (tests/support/payment_rounds.py) against an L402 gate that
answers every 402 with one challenge (``repeat_invoice``), on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState, Message
from django_outbox.payments import opening, paying
from django_outbox.payments.lookups import History, spent_today
from django_outbox.payments.models import PaymentAttempt
from django_outbox.payments.reports import PAYING_ELSEWHERE, STORED_MEANWHILE, Challenge
from testproject.demo.keys import ACTOR
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402InboxServer, Mode
from testproject.lightning.node import FakeNode
from tests.support.payment_rounds import PRICE, attempted, recorded, round_of, send, serve

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_caches", "configured")]


@pytest.fixture
def repeating(issuer: InvoiceIssuer) -> Iterator[L402InboxServer]:
    """An inbox selling tokens that serves one invoice to every 402, paid or not."""
    server = serve(issuer, repeat_invoice=True)
    yield server
    server.stop()


def a_moment_later() -> None:
    """``HOLD_WHILE_PAYING`` after the last payable 402: the process sends bare again."""
    paying._challenged.clear()


def test_an_invoice_served_again_after_a_failed_payment_is_paid_on_the_second_try(
    repeating: L402InboxServer, node: FakeNode
) -> None:
    [pk] = send(repeating.url())
    round_of([pk])  # 402: stored
    node.fail_next("no_route")
    [failed] = round_of([pk])
    assert failed.result == "retry"
    attempt = PaymentAttempt.objects.get()
    assert (attempt.state, attempt.paid_at, spent_today(ACTOR)) == ("failed", None, 0)
    a_moment_later()
    [again] = round_of([pk])  # the same invoice: the failed attempt is reopened
    assert again.result == "paying"
    attempt.refresh_from_db()
    assert (attempt.state, attempt.reason, attempt.delivery_id) == ("pending", "", pk)
    assert spent_today(ACTOR) == PRICE + 100  # reserved again
    [delivered] = round_of([pk])
    assert delivered.result == "delivered"
    assert PaymentAttempt.objects.get().state == "used"
    assert [a.status for a in node.attempts] == ["failed", "complete"]
    assert spent_today(ACTOR) == PRICE
    assert repeating.gate.decisions.count("challenged") == 2


def test_a_failed_invoice_is_reopened_for_the_delivery_it_is_served_to(
    repeating: L402InboxServer, node: FakeNode
) -> None:
    first, second = send(repeating.url("/a")), send(repeating.url("/b"))
    round_of(first)
    node.fail_next("no_route")
    round_of(first)
    assert Delivery.objects.get(pk=first[0]).state == DeliveryState.QUEUED
    a_moment_later()
    [outcome] = round_of(second)
    assert outcome.result == "paying"
    assert PaymentAttempt.objects.get().delivery_id == second[0]
    round_of(second)
    assert Delivery.objects.get(pk=second[0]).state == DeliveryState.DELIVERED
    # The first one finds the token the second bought.
    round_of(first)
    assert Delivery.objects.get(pk=first[0]).state == DeliveryState.DELIVERED
    assert len(node.payments()) == 1


def test_repeated_failures_of_one_invoice_end_with_the_deliverys_attempts(
    repeating: L402InboxServer, node: FakeNode
) -> None:
    [pk] = send(repeating.url())
    Message.objects.update(max_attempts=3)
    node.fail_next("no_route", count=100)
    for _ in range(10):
        a_moment_later()
        round_of([pk])
    row = Delivery.objects.get(pk=pk)
    assert row.state == DeliveryState.FAILED
    assert row.attempts == 3
    assert len(node.attempts) == 3  # one payment an attempt, none more
    assert PaymentAttempt.objects.get().state == "failed"
    assert spent_today(ACTOR) == 0


def test_an_invoice_paid_already_and_served_again_is_refused_with_the_reason(
    issuer: InvoiceIssuer, node: FakeNode
) -> None:
    """A host charging per message that serves its paid invoice again: paying it again
    buys nothing (the node answers with the first payment), so the delivery is refused."""
    server = serve(issuer, mode=Mode.PER_MESSAGE, repeat_invoice=True)
    try:
        [first] = send(server.url("/a"))
        round_of([first])
        round_of([first])
        assert Delivery.objects.get(pk=first).state == DeliveryState.DELIVERED
        [second] = send(server.url("/b"))
        [outcome] = round_of([second])  # the kept token, refused: the paid invoice again
    finally:
        server.stop()
    assert outcome.result == "refused"
    assert outcome.error.startswith("payment refused: invoice_already_paid: ")
    row = Delivery.objects.get(pk=second)
    assert row.state == DeliveryState.REFUSED
    assert len(node.attempts) == 1
    token = PaymentAttempt.objects.get()
    assert (token.state, token.retired_at is not None) == ("used", True)


def test_an_invoice_being_paid_and_served_to_another_host_holds_that_delivery(
    issuer: InvoiceIssuer, repeating: L402InboxServer
) -> None:
    [first] = send(repeating.url())
    round_of([first])  # pending, for this host
    other = L402InboxServer(repeating.gate, "127.0.0.7").start()  # the same challenge
    try:
        [second] = send(other.url())
        outcomes = attempted([second])
    finally:
        other.stop()
    assert recorded(outcomes) == []  # parked
    row = Delivery.objects.get(pk=second)
    assert (row.state, row.last_error, row.attempts) == ("queued", PAYING_ELSEWHERE, 0)
    assert PaymentAttempt.objects.count() == 1


def _stored_meanwhile(patch: pytest.MonkeyPatch, then: Callable[[Challenge], object]) -> None:
    """The ledger reads no stored attempt for the invoice, and ``then(challenge)`` runs
    before it writes: another worker storing it meanwhile.  What the ledger reads after
    its write is refused is what is stored."""
    read = opening.challenge_lookup

    def lookup(delivery_id: int, challenge: Challenge, host: str | None = None) -> History:
        history = read(delivery_id, challenge, host)
        then(challenge)
        patch.setattr(opening, "challenge_lookup", read)
        return history

    patch.setattr(opening, "challenge_lookup", lookup)


def _paid_elsewhere(challenge: Challenge) -> None:
    """The invoice stored and paid for another host, its token used there."""
    soon = timezone.now() + timedelta(hours=1)
    PaymentAttempt.objects.create(
        sender=ACTOR,
        host="127.0.0.9",
        destination="https://127.0.0.9/inbox",
        invoice=challenge.invoice,
        macaroon=challenge.macaroon,
        payment_hash=challenge.payment_hash,
        amount_msat=PRICE,
        state="used",
        paid_at=timezone.now(),
        invoice_expires_at=soon,
        expires_at=soon,
    )


def test_a_unique_hash_refused_by_a_race_is_judged_by_what_is_stored(
    repeating: L402InboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    [pk] = send(repeating.url())
    [challenged] = attempted([pk])
    _stored_meanwhile(monkeypatch, _paid_elsewhere)
    [outcome] = recorded([challenged])
    assert outcome.result == "refused"
    assert outcome.error.startswith("payment refused: invoice_already_paid")
    assert PaymentAttempt.objects.get().host == "127.0.0.9"
    assert spent_today(ACTOR) == 0  # reserved before the insert, given back


def _gone(attempt: PaymentAttempt, fields: dict[str, Any]) -> bool:
    """Another worker deleted the attempt between the ledger's read and its reopening."""
    attempt.delete()
    return False


def test_a_conflict_that_nothing_stored_explains_is_held_briefly_to_look_again(
    repeating: L402InboxServer, node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    [pk] = send(repeating.url())
    round_of([pk])
    node.fail_next("no_route")
    round_of([pk])  # failed unpaid: reopenable
    a_moment_later()
    [challenged] = attempted([pk])
    with monkeypatch.context() as patch:
        patch.setattr(opening, "_reopen", _gone)
        assert recorded([challenged]) == []  # parked
    row = Delivery.objects.get(pk=pk)
    assert (row.state, row.last_error) == ("queued", STORED_MEANWHILE)
    a_moment_later()
    assert [o.result for o in round_of([pk])] == ["paying"]  # stored anew
    assert [o.result for o in round_of([pk])] == ["delivered"]

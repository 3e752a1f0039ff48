"""A host known to charge per message is paid in the attempt that met its 402.

The attempt stores the challenge (committed, on a payment thread), pays it and sends
again with the token: one claim and one recording per paid delivery.  A store that
fails pays nothing; what the ledger holds or refuses ends the attempt as the 402 it
answered.  The stores run on the payment threads' own connections, so these tests
commit (``transaction=True``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from django_outbox.payments import opening, settling
from django_outbox.payments.batches import Verdict
from django_outbox.payments.ledger import ONE_DELIVERY
from django_outbox.payments.lookups import History, spent_today
from django_outbox.payments.models import PaymentAttempt, PaymentHost
from django_outbox.payments.reports import PAYING_ELSEWHERE, Challenge, Change
from django_outbox.values.outcomes import AttemptResult
from testproject.demo.keys import ACTOR
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402InboxServer, Mode
from testproject.lightning.node import FakeNode, NodePayment
from tests.support.payment_rounds import PRICE, attempted, recorded, round_of, send, serve, state
from tests.unit.payments.test_ledger_reads import attempt

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("memory_caches", "worker_process", "configured"),
]


@pytest.fixture
def per_message(issuer: InvoiceIssuer) -> Iterator[L402InboxServer]:
    """An L402 inbox that charges for every message, known to."""
    server = serve(issuer, mode=Mode.PER_MESSAGE)
    PaymentHost.objects.create(host=server.host, per_message=True)
    yield server
    server.stop()


def test_one_attempt_stores_pays_and_delivers(per_message: L402InboxServer, node: FakeNode) -> None:
    [pk] = send(per_message.url())
    [outcome] = round_of([pk])
    assert (outcome.result, outcome.status) == ("delivered", 202)
    assert outcome.report is not None and outcome.report.paid_msat == PRICE
    assert state(pk) == "delivered"
    assert per_message.gate.decisions == ["challenged", "accepted"]
    attempt = PaymentAttempt.objects.get()
    assert (attempt.delivery_id, attempt.state, attempt.uses) == (pk, "used", 1)
    assert attempt.retired_at is not None, "a per-message token opens one delivery"
    assert len(node.payments()) == 1


def test_the_attempt_is_committed_before_the_node_is_asked(
    per_message: L402InboxServer, node: FakeNode
) -> None:
    """The node's thread (the fake LND's server) reads with a connection of its own."""
    seen: list[list[str]] = []
    pay = node.pay

    def paying(invoice: str, amount_msat: int | None, max_fee_msat: int) -> NodePayment:
        seen.append(list(PaymentAttempt.objects.values_list("state", flat=True)))
        return pay(invoice, amount_msat, max_fee_msat)

    node.pay = paying  # type: ignore[method-assign]
    [pk] = send(per_message.url())
    round_of([pk])
    assert seen == [["pending"]]


def test_the_step_that_stored_the_attempt_pays_without_asking_the_node_first(
    per_message: L402InboxServer, node: FakeNode
) -> None:
    """Stored by this step, the attempt cannot have been paid: one node call, not two.
    An attempt found stored at a claim is asked about first (``test_paying``)."""
    asked: list[str] = []
    lookup = node.lookup

    def looking(payment_hash: str) -> NodePayment | None:
        asked.append(payment_hash)
        return lookup(payment_hash)

    node.lookup = looking  # type: ignore[method-assign]
    [pk] = send(per_message.url())
    [outcome] = round_of([pk])
    assert outcome.result == "delivered"
    assert (asked, len(node.payments())) == ([], 1)


def test_a_database_error_storing_the_payment_pays_nothing(
    per_message: L402InboxServer, node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> None:
        raise OperationalError("the database went away")

    [pk] = send(per_message.url())
    with monkeypatch.context() as patch:
        patch.setattr(settling, "store_now", broken)
        [failed] = round_of([pk])
    assert (failed.result, failed.status) == ("retry", 402), "the host answered; not its fault"
    assert failed.error.startswith("internal: storing its payment: the database went away")
    assert not PaymentAttempt.objects.exists()
    assert node.attempts == []
    assert [o.result for o in round_of([pk])] == ["delivered"]
    assert len(node.payments()) == 1


def test_what_the_ledger_holds_ends_the_attempt_unpaid(
    per_message: L402InboxServer, node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    [pk] = send(per_message.url())
    with monkeypatch.context() as patch:
        held = Verdict(AttemptResult.HELD, PAYING_ELSEWHERE, 2.0)
        patch.setattr(settling, "store_now", lambda *args: held)
        [outcome] = attempted([pk])
    assert (outcome.result, outcome.status, outcome.error) == ("held", 402, PAYING_ELSEWHERE)
    assert recorded([outcome]) == [], "parked until a payment to its host ends"
    assert node.attempts == []
    assert state(pk) == "queued"


def test_a_token_refused_as_soon_as_it_is_paid_is_noted_and_the_new_402_stored(
    issuer: InvoiceIssuer, node: FakeNode
) -> None:
    """An inbox whose tokens expire at once: each attempt pays once and meets a 402 with
    its token; the recorder stores that new challenge (and caps the payments)."""
    server = serve(issuer, mode=Mode.PER_MESSAGE, token_lifetime=0.0)
    try:
        PaymentHost.objects.create(host=server.host, per_message=True)
        [pk] = send(server.url())
        [outcome] = round_of([pk])
    finally:
        server.stop()
    assert outcome.result == "paying"
    assert outcome.report is not None
    changes = [s.change for s in outcome.report.settlements]  # type: ignore[attr-defined]
    assert changes == [Change.PAID, Change.REJECTED]
    rows = PaymentAttempt.objects.order_by("id")
    assert [row.state for row in rows] == ["failed", "pending"]
    assert rows[0].paid_at is not None
    assert len(node.payments()) == 1


def test_an_invoice_stored_meanwhile_is_not_stored_twice_and_its_reservation_is_given_back(
    per_message: L402InboxServer, node: FakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker stores the same invoice between the read and the insert: the insert
    stores nothing (without an error or a savepoint), what is stored decides (that
    payment is under way: held), and the budget reserved first is given back."""
    read = opening.challenge_lookup

    def stored_meanwhile(
        delivery_id: int, challenge: Challenge, host: str | None = None
    ) -> History:
        history = read(delivery_id, challenge, host)
        attempt(challenge.payment_hash, host=per_message.host, reserved_msat=0, slot=5)
        return history

    [pk] = send(per_message.url())
    with monkeypatch.context() as patch:
        patch.setattr(opening, "challenge_lookup", stored_meanwhile)
        [outcome] = attempted([pk])
    assert (outcome.result, outcome.status, outcome.error) == ("held", 402, PAYING_ELSEWHERE)
    assert list(PaymentAttempt.objects.values_list("delivery_id", "slot")) == [(None, 5)]
    assert spent_today(ACTOR) == 0
    assert node.attempts == []


def test_the_ledger_takes_the_claims_word_that_its_host_charges_per_message(
    per_message: L402InboxServer, node: FakeNode
) -> None:
    """The attempt's report says the host charges per message, as its claim read: the
    recorder does not read it again, and the token that opened its delivery is retired."""
    [pk] = send(per_message.url())
    [outcome] = attempted([pk])
    assert outcome.report is not None and outcome.report.per_message  # type: ignore[attr-defined]
    with CaptureQueriesContext(connection) as queries:
        assert [o.result for o in recorded([outcome])] == ["delivered"]
    hosts_table = PaymentHost._meta.db_table
    assert not [q["sql"] for q in queries if hosts_table in q["sql"]]
    attempt = PaymentAttempt.objects.get()
    assert (attempt.state, attempt.uses, attempt.reason) == ("used", 1, ONE_DELIVERY)
    assert attempt.retired_at is not None

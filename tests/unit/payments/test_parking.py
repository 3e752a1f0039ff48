"""Deliveries whose host another delivery is paying: parked by the claim, at no cost.

The claim leaves them queued in the database, due when their hold ends, with no
outcome, no history row and no message; the publishing of due deliveries (the
recovery pass, the sweeper) sends them again.  Each test has a fresh worker process,
whose cache of messages no earlier test's rows (with the same ids) can fill.  The holds
met after the claim (in the engine, or by the recorder) are parked by the recorder.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox import Batch, outbox
from django_outbox.models import Attempt, Delivery, DeliveryState
from django_outbox.payments import paying as paying_module
from django_outbox.payments.claims import payment_jobs
from django_outbox.payments.lookups import claim_lookup
from django_outbox.payments.models import PaymentAttempt
from django_outbox.payments.reports import MET_402_LATELY, PAYING_ELSEWHERE
from django_outbox.store.claim_rows import load_messages, new_token
from django_outbox.store.transitions import claim
from django_outbox.upkeep import recovery_pass
from testproject.demo.keys import ACTOR
from testproject.lightning.l402_inbox import L402InboxServer
from testproject.lightning.node import FakeNode
from tests.support.broker import RecordingApp
from tests.support.payment_rounds import NOTE, attempted, recorded, round_of, send, state

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("memory_caches", "configured", "worker_process"),
]


def test_deliveries_behind_a_payment_are_parked_without_an_attempt(
    inbox: L402InboxServer, node: FakeNode, broker: RecordingApp
) -> None:
    first, *others = send(inbox.url("/a"), inbox.url("/b"), inbox.url("/c"))
    [paying] = round_of([first])
    assert paying.result == "paying"
    broker.clear()
    before = timezone.now()

    assert attempted(others) == [], "nothing sent, nothing for the recorder"

    rows = list(Delivery.objects.filter(id__in=others))
    assert {row.state for row in rows} == {DeliveryState.QUEUED}
    assert {(row.attempts, row.claimed_by, row.dispatched_at) for row in rows} == {(0, "", None)}
    assert all(row.next_attempt_at > before for row in rows)
    assert {row.last_error for row in rows} == {"held: a payment to this host is under way"}
    assert not Attempt.objects.filter(delivery_id__in=others).exists(), "a hold is no attempt"
    assert broker.sent == []
    # Once due, the recovery pass publishes them again, with the default settings.
    Delivery.objects.filter(id__in=others).update(next_attempt_at=before)
    assert recovery_pass.dispatch_all_due() == 2
    assert [pk for ids in broker.lanes().values() for pk in ids] == others
    round_of([first])
    assert [o.result for o in round_of(others)] == ["delivered", "delivered"]
    assert len(node.payments()) == 1


def test_deliveries_claimed_just_after_a_402_there_are_parked_before_it_is_stored(
    inbox: L402InboxServer,
) -> None:
    first, *others = send(inbox.url("/a"), inbox.url("/b"), inbox.url("/c"))
    [challenged] = attempted([first])
    assert challenged.result == "paying"
    assert not PaymentAttempt.objects.exists(), "the recorder has not stored it yet"
    assert attempted(others) == []
    rows = Delivery.objects.filter(id__in=others)
    assert {(row.state, row.last_error[:18]) for row in rows} == {("queued", "held: a payment to")}


def test_a_hold_that_would_outlast_the_deadline_fails_the_delivery(
    inbox: L402InboxServer,
) -> None:
    [first] = send(inbox.url("/a"))
    round_of([first])
    soon = timezone.now() + timedelta(seconds=0.5)  # before the shortest hold (0.75 s) ends
    outbox.send(ACTOR, NOTE, [inbox.url("/b")], batch=Batch(deadline=soon))
    late = Delivery.objects.get(inbox=inbox.url("/b")).pk
    [held] = attempted([late])
    assert held.result == "held"
    recorded([held])
    assert state(late) == DeliveryState.FAILED


def test_a_claim_reads_attempts_tokens_payments_under_way_and_charging_in_two_queries(
    inbox: L402InboxServer,
) -> None:
    first, second = send(inbox.url("/a"), inbox.url("/b"))
    round_of([first])
    with CaptureQueriesContext(connection) as queries:
        found = claim_lookup([first, second], [inbox.host])
    assert len(queries) == 2
    assert set(found.attempts) == {first}
    assert found.paying == {inbox.host: {first}}
    assert found.per_message == set()
    assert found.tokens == {}
    round_of([first])
    found = claim_lookup([first, second], [inbox.host])
    assert (found.attempts, found.paying, set(found.tokens)) == ({}, {}, {inbox.host})


def test_a_hosts_queue_is_counted_once_for_the_holds_of_claims_close_together(
    inbox: L402InboxServer,
) -> None:
    first, *others = send(*(inbox.url(f"/{n}") for n in range(4)))
    round_of([first])
    rows = claim(others, new_token())
    messages = load_messages(row.message_id for row in rows)
    with CaptureQueriesContext(connection) as queries:
        payment_jobs(rows[:1], messages)
    assert len(queries) == 3, "the payment lookup (two), the queue's length"
    with CaptureQueriesContext(connection) as queries:
        _, wait = payment_jobs(rows[1:], messages)
    assert len(queries) == 2, "the payment lookup (two)"
    assert set(wait) == set(others) - {rows[0].id}


def test_a_402_recorded_while_another_delivery_pays_its_host_is_parked_by_the_recorder(
    inbox: L402InboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other = send(inbox.url("/a"), inbox.url("/b"))
    [paying] = attempted([first])
    monkeypatch.setattr(paying_module, "_challenged", {})  # the other worker's process
    [challenged] = attempted([other])
    assert (paying.result, challenged.result) == ("paying", "paying")
    assert [o.row.id for o in recorded([paying, challenged])] == [first]
    row = Delivery.objects.get(pk=other)
    assert (row.state, row.last_error, row.attempts) == ("queued", PAYING_ELSEWHERE, 0)
    assert (row.claimed_by, row.dispatched_at) == ("", None)
    assert not Attempt.objects.filter(delivery_id=other).exists(), "a hold is no attempt"
    assert PaymentAttempt.objects.count() == 1


def test_a_hold_met_in_the_engine_that_would_outlast_the_deadline_fails_the_delivery(
    inbox: L402InboxServer,
) -> None:
    [first] = send(inbox.url("/a"))
    soon = timezone.now() + timedelta(seconds=0.5)  # before the hold (1 s) ends
    outbox.send(ACTOR, NOTE, [inbox.url("/b")], batch=Batch(deadline=soon))
    late = Delivery.objects.get(inbox=inbox.url("/b")).pk
    [paying, held] = attempted([first, late])
    assert (paying.result, held.result, held.error) == ("paying", "held", MET_402_LATELY)
    recorded([paying, held])
    assert state(late) == DeliveryState.FAILED

"""The claim's payment statements, written out: the rows the ORM's filter would give."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.payments.claim_queries import claim_attempts, per_message_hosts
from django_outbox.payments.lookups import claim_lookup
from django_outbox.payments.models import PaymentAttempt, PaymentHost
from tests.support.payment_rounds import send
from tests.unit.payments.test_ledger_reads import HOST, attempt

pytestmark = pytest.mark.django_db


def test_open_attempts_of_the_deliveries_and_the_hosts_payments_and_tokens() -> None:
    pk, other = send(f"https://{HOST}/a", "https://127.0.0.6/b")
    now, past = timezone.now(), timezone.now() - timedelta(seconds=1)
    wanted = [
        attempt("a" * 64, "paid", delivery_id=pk, host="127.0.0.7"),  # its own, to present
        attempt("b" * 64, "pending", delivery_id=other, slot=0),  # under way at the host
        attempt("c" * 64, "used", paid_at=now),  # the host's kept token
    ]
    for unwanted in (
        attempt("d" * 64, "failed", delivery_id=pk),  # not open
        attempt("e" * 64, "used", expires_at=past),  # expired
        attempt("f" * 64, "used", retired_at=now),  # refused since
        attempt("0" * 64, "pending", host="127.0.0.8", slot=0),  # another host's
    ):
        assert unwanted.pk
    read = claim_attempts({pk}, {HOST}, timezone.now())
    assert [row.pk for row in read.rows] == [wanted[2].pk, wanted[0].pk]  # newest first
    assert {row.expires_at.tzinfo is not None for row in read.rows} == {True}  # converted dates
    assert read.paying == [(HOST, other)]  # another delivery's payment: its host and delivery
    assert claim_attempts(set(), set(), now) == ([], [])
    assert [row.pk for row in claim_attempts(set(), {HOST}, now).rows] == [wanted[2].pk]
    assert claim_attempts(set(), {HOST}, now).paying == [(HOST, other)]
    found = claim_lookup([pk, other], [HOST])  # its own payment under way: read whole too
    assert {pk: wanted[0].pk, other: wanted[1].pk} == {
        delivery: open_attempt.attempt_id for delivery, open_attempt in found.attempts.items()
    }
    assert (found.paying, found.tokens[HOST].attempt_id) == ({HOST: {other}}, wanted[2].pk)


def test_a_claim_reads_its_payments_in_two_statements_and_its_per_message_hosts() -> None:
    PaymentHost.objects.create(host=HOST, per_message=True)
    PaymentHost.objects.create(host="127.0.0.6", per_message=False)
    assert per_message_hosts({HOST, "127.0.0.6", "127.0.0.9"}) == {HOST}
    assert per_message_hosts(set()) == set()
    with CaptureQueriesContext(connection) as queries:
        found = claim_lookup(list(range(1, 101)), [f"127.0.1.{n}" for n in range(100)] + [HOST])
    assert len(queries) == 2
    assert (found.attempts, found.tokens, found.paying, found.per_message) == ({}, {}, {}, {HOST})
    assert PaymentAttempt.objects.count() == 0

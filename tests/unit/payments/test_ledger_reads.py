"""What the ledger reads per payment: once what it needs, and never a stale copy.

The recorder writes each paid delivery's reports (its challenge, then its payment and
token), and its statements are most of a paid delivery's extra CPU in a worker: these
tests hold the reads that were cut to what they were replaced by.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.payments import budget, ledger
from django_outbox.payments.batches import Effects
from django_outbox.payments.lookups import challenge_lookup, spent_today
from django_outbox.payments.models import PaymentAttempt, PaymentBudget, PaymentHost
from django_outbox.payments.reports import Challenge, Change, Settlement
from testproject.demo.keys import ACTOR
from tests.support.payment_rounds import PRICE, send

pytestmark = pytest.mark.django_db

HOST = "127.0.0.5"


def attempt(payment_hash: str, state: str = "pending", **fields: object) -> PaymentAttempt:
    """A stored attempt at ``HOST`` (no delivery unless given)."""
    soon = timezone.now() + timedelta(hours=1)
    values: dict[str, object] = {
        "sender": ACTOR,
        "host": HOST,
        "destination": f"https://{HOST}/inbox",
        "invoice": "lnbcrt1" + payment_hash[:20],
        "macaroon": "m",
        "payment_hash": payment_hash,
        "amount_msat": PRICE,
        "reserved_msat": PRICE + 100,
        "state": state,
        "invoice_expires_at": soon,
        "expires_at": soon,
        **fields,
    }
    return PaymentAttempt.objects.create(**values)


def challenge(payment_hash: str) -> Challenge:
    """A checked challenge for the invoice of ``payment_hash``."""
    return Challenge(
        destination=f"https://{HOST}/inbox",
        scheme="L402",
        payment_hash=payment_hash,
        amount_msat=PRICE,
        pay_amount_msat=None,
        invoice_expires_at=timezone.now().timestamp() + 3600,
        invoice="lnbcrt1" + payment_hash[:20],
        macaroon="m",
    )


def test_one_query_counts_the_deliverys_payments_and_finds_the_invoices_attempt() -> None:
    pk, other = send(f"https://{HOST}/a", "https://127.0.0.6/b")
    attempt("a" * 64, "pending", delivery_id=pk, slot=0)
    attempt("b" * 64, "used", delivery_id=pk, paid_at=timezone.now())
    attempt("c" * 64, "failed", delivery_id=pk)  # failed unpaid: cost nothing
    stored = attempt("d" * 64, "paid", delivery_id=other, paid_at=timezone.now())
    attempt("f" * 64, "pending", host="127.0.0.9", slot=3)  # another host's payment
    with CaptureQueriesContext(connection) as queries:
        assert challenge_lookup(pk, challenge("e" * 64)) == (2, None, None)
    assert len(queries) == 1
    with CaptureQueriesContext(connection) as queries:
        made, earlier, _ = challenge_lookup(pk, challenge("d" * 64))
    assert len(queries) == 2  # the invoice's attempt is read whole
    assert (made, earlier) == (2, stored)
    assert earlier is not None and earlier.state == "paid" and earlier.invoice == stored.invoice
    assert challenge_lookup(other, challenge("e" * 64)) == (1, None, None)
    with CaptureQueriesContext(connection) as queries:  # and the host's slots under way
        assert challenge_lookup(other, challenge("e" * 64), HOST) == (1, None, {0})
    assert len(queries) == 1
    assert challenge_lookup(other, challenge("e" * 64), "127.0.0.9") == (1, None, {3})
    assert challenge_lookup(other, challenge("e" * 64), "127.0.0.8") == (1, None, set())


def test_the_budget_row_is_written_once_a_day_and_refusals_spend_nothing() -> None:
    day, limit = date(2026, 1, 2), 3 * PRICE
    with CaptureQueriesContext(connection) as queries:
        assert budget.reserve(ACTOR, day, PRICE, limit)  # no row yet: made, then raised
    first = len(queries)
    with CaptureQueriesContext(connection) as queries:
        assert budget.reserve(ACTOR, day, PRICE, limit)
    assert len(queries) < first == 3
    assert not budget.reserve(ACTOR, day, 2 * PRICE, limit)  # over the budget
    assert PaymentBudget.objects.get(sender=ACTOR, day=day).spent_msat == 2 * PRICE


def test_a_token_used_just_after_its_payment_is_not_read_again() -> None:
    PaymentHost.objects.create(host=HOST, per_message=True)
    paid = attempt("a" * 64, slot=0)
    report = [
        Settlement(paid.pk, Change.PAID, preimage="00" * 32, fee_msat=10),
        Settlement(paid.pk, Change.USED),
    ]
    with CaptureQueriesContext(connection) as queries:
        ledger.settle(report)
    reads = [q for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    attempt_reads = [q for q in reads if "paymentattempt" in q["sql"].lower()]
    assert len(attempt_reads) == 1
    writes = [q for q in queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    assert len([q for q in writes if "paymentattempt" in q["sql"].lower()]) == 1  # paid and used
    paid.refresh_from_db()
    assert (paid.state, paid.uses, paid.retired_at is not None) == ("used", 1, True)
    assert spent_today(ACTOR) == 0  # no budget row today: the release finds none


def test_a_settlement_between_payment_and_use_makes_the_use_read_the_row() -> None:
    paid = attempt("a" * 64, slot=0)
    effects = Effects()
    ledger._settle(Settlement(paid.pk, Change.PAID, preimage="00" * 32), effects)
    assert effects.paid[paid.pk].state == "paid"
    ledger._settle(Settlement(paid.pk, Change.REJECTED, reason="HTTP 402"), effects)
    assert effects.paid == {}
    ledger._settle(Settlement(paid.pk, Change.USED), effects)
    paid.refresh_from_db()
    assert (paid.state, paid.uses) == ("failed", 0)  # refused, as stored: not used
    assert HOST not in effects.release


def _attempt_statements(queries: CaptureQueriesContext) -> list[str]:
    """The first word of each statement on the attempts' table."""
    return [q["sql"].split()[0].upper() for q in queries if "paymentattempt" in q["sql"].lower()]


@pytest.mark.parametrize("read_pending", [True, False])
def test_a_payment_its_payer_read_pending_is_made_paid_in_one_statement(read_pending: bool) -> None:
    PaymentHost.objects.create(host=HOST, per_message=True)
    budget.reserve(ACTOR, timezone.now().date(), PRICE + 100, 10 * PRICE)
    paid = attempt("a" * 64, slot=0)
    read = PRICE + 100 if read_pending else None
    report = [
        Settlement(paid.pk, Change.PAID, preimage="00" * 32, fee_msat=10, reserved_msat=read),
        Settlement(paid.pk, Change.USED),
    ]
    with CaptureQueriesContext(connection) as queries:
        ledger._settle_all(report, Effects(), HOST)
    assert _attempt_statements(queries) == (["UPDATE"] if read_pending else ["SELECT", "UPDATE"])
    paid.refresh_from_db()
    assert (paid.state, paid.uses, paid.retired_at is not None) == ("used", 1, True)
    assert (paid.fee_msat, paid.reserved_msat, paid.preimage) == (10, PRICE + 10, "00" * 32)
    assert spent_today(ACTOR) == PRICE + 10  # the unspent 90 given back


@pytest.mark.parametrize("since", ["reserved again", "failed unpaid", "another host"])
def test_a_payment_whose_attempt_changed_since_it_was_read_reads_it_first(since: str) -> None:
    day = timezone.now().date()
    budget.reserve(ACTOR, day, PRICE + 50, 10 * PRICE)
    changes: dict[str, dict[str, Any]] = {
        "reserved again": {"reserved_msat": PRICE + 50},  # reopened with another reservation
        "failed unpaid": {"state": "failed", "reserved_msat": 0},  # given back already
        "another host": {"reserved_msat": PRICE + 50},
    }
    fields = changes[since]
    paid = attempt("a" * 64, **fields)
    host = "127.0.0.9" if since == "another host" else HOST
    report = [Settlement(paid.pk, Change.PAID, "00" * 32, 10, reserved_msat=PRICE + 100)]
    with CaptureQueriesContext(connection) as queries:
        ledger._settle_all(report, Effects(), host)
    assert _attempt_statements(queries) == ["UPDATE", "SELECT", "UPDATE"]
    paid.refresh_from_db()
    assert (paid.state, paid.reserved_msat) == ("paid", PRICE + 10)
    # As stored: 40 of the 50 given back, or the price and fee taken again.
    assert spent_today(ACTOR) == (2 * PRICE + 60 if since == "failed unpaid" else PRICE + 10)

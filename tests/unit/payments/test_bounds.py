"""Every value a destination sends in the paid path is bounded before it is used.

A ``402`` is hostile until checked: its invoice's creation time, expiry and amount
are refused with a reason when no node would write them, so that nothing the ledger
turns into a date or stores can make it raise.  The properties run whole challenges
(real signed invoices, macaroons naming them) through the worker's check and the
ledger, on SQLite.
"""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_outbox import outbox
from django_outbox.models import Delivery
from django_outbox.payments.clients.lnd import LndRestClient
from django_outbox.payments.errors import InvoiceRefused, Reason
from django_outbox.payments.invoices import (
    MAX_CLOCK_SKEW,
    MAX_EXPIRY,
    DecodedInvoice,
    check_invoice,
)
from django_outbox.payments.ledger import record_payments, settle
from django_outbox.payments.models import PaymentAttempt
from django_outbox.payments.paying import Exchange, PaymentJob, challenge_of
from django_outbox.payments.reports import Challenge, Change, PaymentReport, Settlement
from django_outbox.payments.settings import MAX_MSAT, PaymentSettings, problems
from django_outbox.store.claim_rows import load_messages, new_token
from django_outbox.store.transitions import claim
from django_outbox.transport import Response
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptResult, Outcome
from testproject.demo.keys import ACTOR
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from tests.support.payment_rounds import NOTE

URL = "https://paid.example/inbox"
#: The worker's settings, with the largest price a setting may name: only the bounds
#: stand between a hostile amount and the ledger.
SETTINGS = PaymentSettings(client="unused", network="bcrt", max_price_msat=MAX_MSAT)
REASONS = {reason.value for reason in Reason}
HASH = "ab" * 32
NOW = time.time()


def job() -> PaymentJob:
    """A job that only reads challenges (its client is never called)."""
    client = LndRestClient("http://127.0.0.1:9", macaroon_hex="00")
    return PaymentJob(SETTINGS, client, time.monotonic() + 300)


def answer(header: str) -> Response:
    return Response(402, {"WWW-Authenticate": header}, b"", 0.0)


def decoded(**values: object) -> DecodedInvoice:
    fields: dict[str, object] = {
        "invoice": "lnbcrt1",
        "network": "bcrt",
        "amount_msat": 1000,
        "payment_hash": HASH,
        "created_at": int(NOW),
        "expiry": 3600,
        "payee": "",
        **values,
    }
    return DecodedInvoice(**fields)  # type: ignore[arg-type]


def refusal(invoice: DecodedInvoice) -> Reason:
    with pytest.raises(InvoiceRefused) as caught:
        check_invoice(invoice, network="bcrt", max_price_msat=MAX_MSAT, size=10, now=NOW)
    return caught.value.reason


# -- one bound each ------------------------------------------------------------------


def test_the_issues_invoice_expiring_after_ten_to_the_twelve_seconds_is_refused(
    issuer: InvoiceIssuer,
) -> None:
    """Issue 21's trigger: it passed every check, then the ledger's date raised."""
    found = challenge_of(job(), URL, 300, answer(issuer.challenge(10_000, expiry=10**12).header))
    assert isinstance(found, Exchange)
    assert found.result is AttemptResult.REFUSED
    assert found.error.startswith("payment refused: expiry_too_long: expires after 10")


def test_an_expiry_of_a_year_is_paid_and_a_second_more_is_not() -> None:
    assert check_invoice(decoded(expiry=MAX_EXPIRY), network="bcrt", max_price_msat=10**6, size=1)
    assert refusal(decoded(expiry=MAX_EXPIRY + 1)) is Reason.EXPIRY_TOO_LONG


def test_an_invoice_created_in_the_future_is_refused_past_the_skew() -> None:
    ahead = decoded(created_at=int(NOW) + MAX_CLOCK_SKEW)
    assert check_invoice(ahead, network="bcrt", max_price_msat=10**6, size=1, now=NOW)
    far = decoded(created_at=int(NOW) + MAX_CLOCK_SKEW + 1)
    assert refusal(far) is Reason.INVOICE_FROM_THE_FUTURE
    assert refusal(decoded(created_at=2**35 - 1)) is Reason.INVOICE_FROM_THE_FUTURE


def test_an_amount_past_every_bitcoin_is_refused_before_the_price(issuer: InvoiceIssuer) -> None:
    header = issuer.challenge(10**20).header
    found = challenge_of(job(), URL, 300, answer(header))
    assert isinstance(found, Exchange)
    assert found.error.startswith("payment refused: amount_out_of_range")
    assert refusal(decoded(amount_msat=MAX_MSAT + 1)) is Reason.AMOUNT_OUT_OF_RANGE
    assert refusal(decoded(amount_msat=0)) is Reason.AMOUNT_OUT_OF_RANGE


def test_a_payment_hash_that_is_not_32_bytes_or_a_negative_time_is_undecodable() -> None:
    assert refusal(decoded(payment_hash="ab" * 31)) is Reason.INVOICE_UNDECODABLE
    assert refusal(decoded(payment_hash="AB" * 32)) is Reason.INVOICE_UNDECODABLE
    assert refusal(decoded(created_at=-1)) is Reason.INVOICE_UNDECODABLE
    assert refusal(decoded(expiry=-1)) is Reason.INVOICE_UNDECODABLE


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MAX_PRICE_MSAT", MAX_MSAT + 1),
        ("DAILY_BUDGET_MSAT", 10**30),
        ("MAX_FEE_MSAT", MAX_MSAT + 1),
        ("TOKEN_LIFETIME", 10**12),
        ("HOLD_WHILE_PAYING", 3600.0),
    ],
)
def test_settings_past_what_the_ledger_can_store_are_refused(key: str, value: float) -> None:
    found = problems({"CLIENT": "x.Y", key: value})
    assert [name for name, _ in found] == [key]
    assert "must be at most" in found[0][1]


@pytest.mark.django_db
def test_a_fee_no_payment_can_cost_is_stored_bounded(two_orphans: list[PaymentAttempt]) -> None:
    """The node is ours, but what it answers is stored: it cannot overflow a column."""
    pending = two_orphans[1]
    settle([Settlement(pending.pk, Change.PAID, preimage="00" * 32, fee_msat=10**30)])
    pending.refresh_from_db()
    assert (pending.state, pending.fee_msat) == ("paid", MAX_MSAT)
    assert pending.reserved_msat == pending.amount_msat + MAX_MSAT


# -- properties -------------------------------------------------------------------


@pytest.fixture
def claim_and_message() -> tuple[ClaimedRow, MessageData]:
    """One delivery to :data:`URL`, claimed, and its message."""
    outbox.send(ACTOR, NOTE, [URL])
    [row] = claim(list(Delivery.objects.values_list("id", flat=True)), new_token())
    return row, load_messages([row.message_id])[row.message_id]


def refused_with_a_reason(found: Exchange) -> None:
    """``found`` refuses the delivery, naming one of the stable :class:`Reason` values."""
    assert found.result is AttemptResult.REFUSED
    reason = found.error.removeprefix("payment refused: ").split(":")[0]
    assert reason in REASONS, found.error


def stored(found: Exchange | Challenge, claim_and_message: tuple[ClaimedRow, MessageData]) -> None:
    """What the recorder does with a checked 402, rolled back after: a refusal has a
    reason; a challenge is stored (or held over the day's budget), its dates and amounts
    within bounds, and the ledger raises nothing."""
    if isinstance(found, Exchange):
        refused_with_a_reason(found)
        return
    row, message = claim_and_message
    outcome = Outcome(row, message, AttemptResult.PAYING, report=PaymentReport(challenge=found))
    with transaction.atomic():
        [recorded] = record_payments([outcome], SETTINGS).outcomes
        if recorded.result is AttemptResult.HELD:
            assert recorded.error.startswith("held: paying"), recorded.error
            assert found.amount_msat + SETTINGS.max_fee_msat > SETTINGS.daily_budget_msat
        else:
            assert recorded.result is AttemptResult.PAYING
            attempt = PaymentAttempt.objects.get()
            horizon = datetime.now(UTC) + timedelta(seconds=MAX_EXPIRY + MAX_CLOCK_SKEW + 60)
            assert attempt.invoice_expires_at <= horizon
            assert 0 < attempt.reserved_msat < 2**63
        transaction.set_rollback(True)


HYPOTHESIS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
TIMES = st.one_of(
    st.integers(0, 2**35 - 1), st.integers(int(NOW) - 10**6, int(NOW) + 2 * MAX_CLOCK_SKEW)
)
EXPIRIES = st.one_of(st.integers(0, 2 * MAX_EXPIRY), st.integers(0, 2**50))
AMOUNTS = st.one_of(st.none(), st.integers(1, 10**7), st.integers(1, 2**80))


@pytest.mark.django_db
@HYPOTHESIS
@given(created_at=TIMES, expiry=EXPIRIES, amount=AMOUNTS)
def test_no_signed_challenge_can_make_the_ledger_raise(
    claim_and_message: tuple[ClaimedRow, MessageData],
    created_at: int,
    expiry: int,
    amount: int | None,
) -> None:
    issuer = InvoiceIssuer(InvoiceRegistry())
    header = issuer.challenge(amount, expiry=expiry, created_at=created_at).header
    stored(challenge_of(job(), URL, 300, answer(header)), claim_and_message)


@pytest.mark.django_db
@HYPOTHESIS
@given(
    created_at=st.integers(-(2**70), 2**70) | TIMES,
    expiry=st.integers(-(2**70), 2**70) | EXPIRIES,
    amount=st.none() | st.integers(-(2**70), 2**70),
    payment_hash=st.text(alphabet="0123456789abcdefABCDEF", min_size=60, max_size=68),
)
def test_no_decoded_invoice_can_make_the_ledger_raise(
    claim_and_message: tuple[ClaimedRow, MessageData],
    created_at: int,
    expiry: int,
    amount: int | None,
    payment_hash: str,
) -> None:
    """Whatever a decoder (the ``bolt11`` package, or a client's own) returns."""
    invoice = decoded(
        created_at=created_at, expiry=expiry, amount_msat=amount, payment_hash=payment_hash
    )
    try:
        terms = check_invoice(invoice, network="bcrt", max_price_msat=MAX_MSAT, size=300)
    except InvoiceRefused:
        return  # refused with a reason: nothing reaches the ledger
    challenge = Challenge(
        destination=URL,
        scheme="L402",
        payment_hash=terms.invoice.payment_hash,
        amount_msat=terms.amount_msat,
        pay_amount_msat=terms.pay_amount_msat,
        invoice_expires_at=float(terms.invoice.expires_at),
        invoice=invoice.invoice,
        macaroon="AgEA",
    )
    stored(challenge, claim_and_message)


@settings(max_examples=300, deadline=None)
@given(
    macaroon=st.binary(max_size=200),
    invoice=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", max_size=400),
    noise=st.text(max_size=40),
)
def test_no_challenge_text_makes_the_check_raise(macaroon: bytes, invoice: str, noise: str) -> None:
    header = f'L402 macaroon="{base64.b64encode(macaroon).decode()}", invoice="lnbcrt{invoice}"'
    for value in (header, header + noise, noise):
        found = challenge_of(job(), URL, 300, answer(value))
        assert isinstance(found, Exchange)  # nothing here is signed by a node
        refused_with_a_reason(found)

"""Which deliveries are held while another one pays their host, and for how long."""

from __future__ import annotations

import time

import pytest

from django_outbox.payments import paying
from django_outbox.payments.hold_times import HOLD_LIMIT, hold_for
from django_outbox.payments.reports import Change, KeptToken
from django_outbox.values.outcomes import AttemptResult
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402Gate
from testproject.lightning.lnd import FakeLndServer
from tests.unit.payments.test_paying import (
    BODY_SIZE,
    URL,
    Inbox,
    challenge_from,
    exchanged,
    job,
    stored,
)


def test_the_hold_grows_in_powers_of_two_with_the_queue_up_to_the_limit() -> None:
    holds = [hold_for(1.0, queued, factor=1.0) for queued in (0, 2, 3, 5, 16, 30, 1000)]
    assert holds == [1.0, 1.0, 2.0, 4.0, 8.0, 16.0, HOLD_LIMIT]


def test_one_spread_gives_one_hold_per_queue_length() -> None:
    assert hold_for(2.0, 30, factor=0.8) == hold_for(2.0, 31, factor=0.8) == 2.0 * 16 * 0.8


def test_without_a_spread_the_hold_is_spread_at_random_around_it() -> None:
    for _ in range(50):
        assert 0.75 * 16 <= hold_for(1.0, 30) <= 1.25 * 16


def test_after_a_402_the_host_gets_no_request_without_a_token_for_a_moment(
    lnd: FakeLndServer, issuer: InvoiceIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its payment is being stored: another 402 would only be decoded and held."""
    inbox = Inbox(L402Gate(issuer, price_msat=None))
    challenge = challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox))
    held = exchanged(job(lnd), URL, BODY_SIZE, inbox)
    assert (held.result, held.held_for, held.report) == (AttemptResult.HELD, 1.0, None)
    assert inbox.sent == [None], "no second request"
    exchanged(job(lnd, open=stored(challenge)), URL, BODY_SIZE, inbox)  # its own: sent
    exchanged(job(lnd), "https://other.example/inbox", BODY_SIZE, inbox)  # another host
    assert len(inbox.sent) == 3
    monkeypatch.setattr(time, "monotonic", lambda: float("inf"))  # the moment has passed
    assert challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox)).payment_hash


def test_a_402_from_a_host_paid_for_another_delivery_is_held_undecoded(
    lnd: FakeLndServer, issuer: InvoiceIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoding its invoice (a signature check) would serve nothing: the recorder
    would hold it, as the host has a pending attempt."""
    monkeypatch.setattr(paying, "challenge_of", _undecodable)
    inbox = Inbox(L402Gate(issuer, price_msat=None))
    held = exchanged(job(lnd, paying=True), URL, BODY_SIZE, inbox)
    assert (held.result, held.status, held.report) == (AttemptResult.HELD, 402, None)
    assert inbox.sent == [None]


def test_a_402_answering_a_kept_token_is_decoded_even_while_the_host_is_paid(
    lnd: FakeLndServer, issuer: InvoiceIssuer
) -> None:
    """A host that refuses the token it accepted once charges per message: the ledger
    learns it from the refusal, and the challenge is stored, not held undecoded."""
    inbox = Inbox(L402Gate(issuer, price_msat=None))
    challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox))  # this process met a 402
    token = KeptToken(7, "paid.example", "L402", "bWFj", "00" * 32)
    refused = exchanged(job(lnd, token=token, paying=True), URL, BODY_SIZE, inbox)
    assert refused.result is AttemptResult.PAYING
    assert refused.report is not None and refused.report.challenge is not None
    assert [s.change for s in refused.report.settlements] == [Change.RETIRED]
    assert inbox.sent == [None, token.authorization()]


def test_a_host_known_to_charge_per_message_gets_each_deliverys_request_and_payment(
    lnd: FakeLndServer, issuer: InvoiceIssuer
) -> None:
    """No moment of holding after a 402 there (the claim bounds how many go), and every
    402 is decoded, to be paid."""
    inbox = Inbox(L402Gate(issuer, price_msat=None))
    hashes = {
        challenge_from(exchanged(job(lnd, per_message=True), URL, BODY_SIZE, inbox)).payment_hash
        for _ in range(3)
    }
    assert len(hashes) == 3
    assert challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox)).payment_hash
    assert inbox.sent == [None] * 4


def _undecodable(*args: object) -> None:
    raise AssertionError("decoded")

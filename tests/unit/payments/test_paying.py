"""The sending thread's side of paid push, against the L402 gate and the fake LND.

No database: what the ledger would store is built by hand from the reports, as the
recorder would (``stored``), so each step of a crash or a retry can be replayed.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from django_outbox.payments import paying
from django_outbox.payments.clients.lnd import LndRestClient
from django_outbox.payments.paying import Exchange, PaymentJob, exchange
from django_outbox.payments.reports import Challenge, Change, KeptToken, OpenAttempt
from django_outbox.payments.settings import PaymentSettings
from django_outbox.transport import ConnectFailed, Response
from django_outbox.values.outcomes import AttemptResult
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.l402_inbox import L402Gate, Mode
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode

URL = "https://paid.example/inbox"
BODY_SIZE = 300
SETTINGS = PaymentSettings(client="unused", network="bcrt", max_price_msat=50_000)


class Inbox:
    """``post(authorization)`` as the worker's knock makes it, answered by an L402 gate."""

    def __init__(self, gate: L402Gate) -> None:
        self.gate = gate
        self.sent: list[str | None] = []

    def __call__(self, authorization: str | None) -> Response:
        self.sent.append(authorization)
        headers = {"Authorization": authorization} if authorization else {}
        status, extra = self.gate.respond(headers)
        return Response(status, extra, b"", 0.0)


def exchanged(
    job: PaymentJob, url: str, size: int, post: Callable[[str | None], Response]
) -> Exchange:
    """``exchange`` run to its end on a loop of its own, ``post`` standing for the knock."""

    async def knock(authorization: str | None) -> Response:
        return post(authorization)

    return asyncio.run(exchange(job, url, size, knock))


def job(
    lnd: FakeLndServer, *, timeout: float = 5.0, lease: float = 300.0, **parts: object
) -> PaymentJob:
    """A job paying through ``lnd``, claimed now with a lease of ``lease`` seconds."""
    client = LndRestClient(lnd.url, macaroon_hex=lnd.macaroon_hex, timeout=timeout)
    return PaymentJob(SETTINGS, client, time.monotonic() + lease, **parts)  # type: ignore[arg-type]


def stored(challenge: Challenge, attempt_id: int = 1, lifetime: float = 3600) -> OpenAttempt:
    """The pending attempt the ledger writes for ``challenge``."""
    return OpenAttempt(
        attempt_id=attempt_id,
        destination=challenge.destination,
        state="pending",
        scheme=challenge.scheme,
        payment_hash=challenge.payment_hash,
        amount_msat=challenge.amount_msat,
        pay_amount_msat=challenge.pay_amount_msat,
        invoice_expires_at=challenge.invoice_expires_at,
        expires_at=time.time() + lifetime,
        invoice=challenge.invoice,
        macaroon=challenge.macaroon,
    )


def challenge_from(done: Exchange) -> Challenge:
    assert done.result is AttemptResult.PAYING, done
    assert done.report is not None and done.report.challenge is not None
    return done.report.challenge


def delivered_without_paying_again(
    lnd: FakeLndServer, node: FakeNode, attempt: OpenAttempt, inbox: Inbox
) -> None:
    """The next attempt asks the node, finds the payment made, and is accepted."""
    again = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, inbox)
    assert again.response is not None and again.response.status == 202
    assert len(node.attempts) == 1


@pytest.fixture
def gate(issuer: InvoiceIssuer) -> L402Gate:
    return L402Gate(issuer, price_msat=None)


def test_a_402_yields_a_checked_challenge_and_pays_nothing(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    done = exchanged(job(lnd), URL, BODY_SIZE, Inbox(gate))
    challenge = challenge_from(done)
    assert challenge.amount_msat == BODY_SIZE * 100  # amountless: size x rate
    assert challenge.pay_amount_msat == BODY_SIZE * 100
    assert done.status == 402
    assert node.attempts == []
    assert challenge.macaroon not in repr(done)
    assert challenge.invoice not in repr(done)


def test_a_stored_attempt_is_paid_once_and_the_token_accepted(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    attempt = stored(challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox)))
    done = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, inbox)
    assert done.response is not None and done.response.status == 202
    assert done.report is not None
    changes = [s.change for s in done.report.settlements]
    assert changes == [Change.PAID, Change.USED]
    assert done.report.paid_msat == BODY_SIZE * 100
    assert len(node.payments()) == 1
    assert inbox.sent[-1] is not None and inbox.sent[-1].startswith("L402 ")
    assert done.report.settlements[0].preimage not in repr(done)


def test_after_a_crash_the_node_is_asked_and_the_preimage_reused(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    """The worker paid and died before sending: the retry pays nothing more."""
    inbox = Inbox(gate)
    challenge = challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox))
    job(lnd).client.pay(challenge.invoice, challenge.pay_amount_msat, 100)  # then SIGKILL
    done = exchanged(job(lnd, open=stored(challenge)), URL, BODY_SIZE, inbox)
    assert done.response is not None and done.response.status == 202
    assert len(node.payments()) == 1
    assert len(node.attempts) == 1


def test_a_client_that_times_out_after_paying_leaves_it_pending(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    attempt = stored(challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox)))
    lnd.hang_after_paying = 2.0
    done = exchanged(job(lnd, timeout=0.5, open=attempt), URL, BODY_SIZE, inbox)
    assert done.result is AttemptResult.RETRY
    assert "payment client" in done.error
    assert done.report is None  # nothing to store: still pending
    lnd.hang_after_paying = 0.0
    delivered_without_paying_again(lnd, node, attempt, inbox)


def test_in_flight_is_retried_later_without_paying(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    challenge = challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox))
    job(lnd).client.pay(challenge.invoice, challenge.pay_amount_msat, 100)
    node.set_status(challenge.payment_hash, "pending")
    done = exchanged(job(lnd, open=stored(challenge)), URL, BODY_SIZE, inbox)
    assert done.result is AttemptResult.RETRY
    assert "in flight" in done.error
    assert len(node.attempts) == 1
    assert inbox.sent == [None]  # nothing sent after the first 402


def test_a_failed_payment_fails_the_attempt(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    attempt = stored(challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox)))
    node.fail_next("no_route")
    done = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, inbox)
    assert done.result is AttemptResult.RETRY
    assert done.report is not None
    assert [s.change for s in done.report.settlements] == [Change.FAILED]
    assert node.payments() == []


def test_a_preimage_that_is_not_the_payment_hash_is_never_used(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    attempt = stored(challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox)))
    node.lie_about_preimage = True
    done = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, inbox)
    assert done.result is AttemptResult.RETRY
    assert done.report is None  # still pending: the next attempt asks the node again
    assert inbox.sent == [None]
    node.lie_about_preimage = False
    delivered_without_paying_again(lnd, node, attempt, inbox)


def test_an_invoice_that_ran_out_unpaid_is_failed_and_a_new_one_asked(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    challenge = challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox))
    old = replace(stored(challenge), invoice_expires_at=time.time() + 5)  # within 15 s
    done = exchanged(job(lnd, open=old), URL, BODY_SIZE, inbox)
    assert done.report is not None
    assert [s.change for s in done.report.settlements] == [Change.FAILED]
    assert challenge_from(done).payment_hash != challenge.payment_hash
    assert node.attempts == []


def test_a_rejected_paid_token_fails_and_the_new_invoice_is_reported(
    lnd: FakeLndServer, node: FakeNode, issuer: InvoiceIssuer
) -> None:
    gate = L402Gate(issuer, price_msat=None, mode=Mode.PER_MESSAGE)
    inbox = Inbox(gate)
    attempt = stored(challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox)))
    first = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, inbox)
    assert first.response is not None and first.response.status == 202
    preimage = next(s.preimage for s in first.report.settlements if s.preimage)  # type: ignore[union-attr]
    paid = replace(attempt, state="paid", preimage=preimage)
    done = exchanged(job(lnd, open=paid), URL, BODY_SIZE, inbox)  # the same token, again
    assert done.report is not None
    assert [s.change for s in done.report.settlements] == [Change.REJECTED]
    assert challenge_from(done).payment_hash != attempt.payment_hash
    assert len(node.payments()) == 1


def test_a_kept_token_is_presented_first_and_retired_when_refused(
    lnd: FakeLndServer, node: FakeNode, issuer: InvoiceIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for mode, accepted in ((Mode.PER_TOKEN, True), (Mode.PER_MESSAGE, False)):
        monkeypatch.setattr(paying, "_challenged", {})  # each gate met by a process of its own
        gate = L402Gate(issuer, price_msat=None, mode=mode)
        inbox = Inbox(gate)
        attempt = stored(challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox)))
        paid = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, inbox)
        preimage = next(s.preimage for s in paid.report.settlements if s.preimage)  # type: ignore[union-attr]
        token = KeptToken(attempt.attempt_id, "paid.example", "L402", attempt.macaroon, preimage)
        done = exchanged(job(lnd, token=token), URL, BODY_SIZE, inbox)
        assert done.report is not None
        if accepted:
            assert done.response is not None and done.response.status == 202
            assert [s.change for s in done.report.settlements] == [Change.USED]
            assert done.report.paid_msat == 0  # another delivery paid for it
        else:
            assert [s.change for s in done.report.settlements] == [Change.RETIRED]
            challenge_from(done)


def test_tokens_go_only_to_the_host_and_url_that_sold_them(
    lnd: FakeLndServer, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    challenge = challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox))
    token = KeptToken(7, "paid.example", "L402", challenge.macaroon, "00" * 32)
    other = "https://other.example/inbox"
    exchanged(job(lnd, token=token, open=stored(challenge)), other, BODY_SIZE, inbox)
    assert inbox.sent == [None, None]


def test_a_transport_error_after_paying_keeps_what_was_paid(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    attempt = stored(challenge_from(exchanged(job(lnd), URL, BODY_SIZE, Inbox(gate))))

    def broken(authorization: str | None) -> Response:
        raise ConnectFailed("connection refused")

    done = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, broken)
    assert done.result is AttemptResult.RETRY
    assert done.report is not None
    assert [s.change for s in done.report.settlements] == [Change.PAID]


def _other_invoice(issuer: InvoiceIssuer) -> str:
    """A challenge whose macaroon names another invoice than the one it carries."""
    challenge = issuer.challenge(None)
    return challenge.header.replace(challenge.invoice.invoice, issuer.invoice(None).invoice)


def _answer(header: str) -> Callable[[str | None], Response]:
    return lambda authorization: Response(402, {"WWW-Authenticate": header}, b"", 0.0)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda i, r: i.challenge(None, expiry=10).header, "invoice_expired"),
        (lambda i, r: i.challenge(60_000).header, "over_price"),
        (lambda i, r: InvoiceIssuer(r, network="tb").challenge(None).header, "wrong_network"),
        (lambda i, r: _other_invoice(i), "hash_mismatch"),
        (lambda i, r: 'L402 macaroon="abc", invoice=', "malformed"),
        (
            lambda i, r: f"{i.challenge(None).header}, {i.challenge(None).header}",
            "multiple_challenges",
        ),
        (
            lambda i, r: f'L402 macaroon="{"A" * (1 << 20)}", invoice="lnbcrt1"',
            "header_too_large",
        ),
        (
            lambda i, r: (
                f'L402 macaroon="{base64.b64encode(b"x" * 30).decode()}", '
                f'invoice="lnbcrt{"q" * 10_000}"'
            ),
            "invoice_too_large",
        ),
    ],
    ids=[
        "expired",
        "over-price",
        "wrong-network",
        "wrong-hash",
        "malformed",
        "two-challenges",
        "1MB-macaroon",
        "10kB-invoice",
    ],
)
def test_bad_invoices_and_challenges_are_refused_unpaid(
    lnd: FakeLndServer,
    node: FakeNode,
    issuer: InvoiceIssuer,
    registry: InvoiceRegistry,
    make: Callable[[InvoiceIssuer, InvoiceRegistry], str],
    reason: str,
) -> None:
    done = exchanged(job(lnd), URL, BODY_SIZE, _answer(make(issuer, registry)))
    assert done.result is AttemptResult.REFUSED
    assert done.error.startswith("payment refused: " + reason)
    assert done.report is None
    assert node.attempts == []


def test_no_secret_in_the_repr_of_what_travels_between_threads(
    lnd: FakeLndServer, gate: L402Gate
) -> None:
    """A job is logged with ``%r`` when its thread fails; an outcome may be too."""
    inbox = Inbox(gate)
    challenge = challenge_from(exchanged(job(lnd), URL, BODY_SIZE, inbox))
    preimage = "ab" * 32
    token = KeptToken(3, "paid.example", "L402", challenge.macaroon, preimage)
    paid = replace(stored(challenge), state="paid", preimage=preimage)
    payment_job = job(lnd, open=paid, token=token)
    done = exchanged(payment_job, URL, BODY_SIZE, inbox)
    shown = repr(payment_job) + repr(done) + repr(challenge) + str(done.report)
    for secret in (challenge.macaroon, challenge.invoice, preimage, lnd.macaroon_hex):
        assert secret not in shown


def test_a_401_naming_l402_refuses_a_token_as_a_402_does(
    lnd: FakeLndServer, issuer: InvoiceIssuer
) -> None:
    fresh = issuer.challenge(None)
    token = KeptToken(9, "paid.example", "LSAT", fresh.macaroon, "cd" * 32)
    sent: list[str | None] = []

    def post(authorization: str | None) -> Response:
        sent.append(authorization)
        header = f"Signature realm=x, {issuer.challenge(None).header}"
        return Response(401, {"WWW-Authenticate": header}, b"", 0.0)

    done = exchanged(job(lnd, token=token), URL, BODY_SIZE, post)
    assert sent[0] is not None and sent[0].startswith("LSAT ")  # in the token's own scheme
    assert done.report is not None
    assert [s.change for s in done.report.settlements] == [Change.RETIRED]
    assert challenge_from(done).amount_msat == BODY_SIZE * 100


def test_a_401_without_l402_is_an_answer_like_any_other(lnd: FakeLndServer) -> None:
    answer = Response(401, {"WWW-Authenticate": 'Signature realm="x"'}, b"", 0.0)
    done = exchanged(job(lnd), URL, BODY_SIZE, lambda authorization: answer)
    assert done.response is answer
    assert done.report is None

"""The whole paid push, in real bytes over loopback HTTP:

issuer -> 402 + challenge -> parse and check -> LND client pays -> preimage ->
``Authorization`` -> the inbox verifies macaroon, preimage and payment -> 202.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from django_outbox.payments.challenge import L402Challenge, authorization, parse_challenge
from django_outbox.payments.clients.lnd import LndRestClient
from django_outbox.payments.invoices import check_challenge
from testproject.lightning import macaroons
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402Gate, L402InboxServer, Mode
from testproject.lightning.lnd import FakeLndServer

from .conftest import Clock

BODY = b'{"type": "Create"}' * 20


@pytest.fixture
def gate(issuer: InvoiceIssuer) -> L402Gate:
    return L402Gate(issuer, price_msat=None, token_lifetime=600)


@pytest.fixture
def inbox(gate: L402Gate) -> Iterator[L402InboxServer]:
    with L402InboxServer(gate) as server:
        yield server


def post(inbox: L402InboxServer, credential: str | None = None) -> requests.Response:
    headers = {"Authorization": credential} if credential else {}
    return requests.post(inbox.url(), data=BODY, headers=headers, timeout=5)


def pay_for(
    answer: requests.Response, lnd: FakeLndServer, clock: Clock
) -> tuple[L402Challenge, str]:
    """Pay the answer's challenge as the worker will; returns it and the credential."""
    assert answer.status_code == 402
    challenge = parse_challenge(answer.headers["WWW-Authenticate"])
    terms = check_challenge(
        challenge, network="bcrt", max_price_msat=1_000_000, size=len(BODY), now=clock.now
    )
    client = LndRestClient(lnd.url, macaroon_hex=lnd.macaroon_hex, timeout=5)
    payment = client.pay(challenge.invoice, terms.pay_amount_msat, 100)
    assert payment.amount_msat == len(BODY) * 100  # amountless: size x rate
    return challenge, challenge.authorization(payment.preimage)


def test_pays_once_per_token_and_reuses_it(
    inbox: L402InboxServer, gate: L402Gate, lnd: FakeLndServer, clock: Clock
) -> None:
    _, credential = pay_for(post(inbox), lnd, clock)
    assert post(inbox, credential).status_code == 202
    assert post(inbox, credential).status_code == 202
    assert gate.decisions == ["challenged", "accepted", "accepted"]
    assert [r.status for r in inbox.requests()] == [402, 202, 202]
    assert inbox.requests()[1].headers["Authorization"] == credential
    assert len(lnd.node.payments()) == 1


def test_a_token_expires(
    inbox: L402InboxServer, gate: L402Gate, lnd: FakeLndServer, clock: Clock
) -> None:
    _, credential = pay_for(post(inbox), lnd, clock)
    clock.now += 601
    answer = post(inbox, credential)
    assert answer.status_code == 402
    assert gate.decisions[-2:] == ["refused: token expired", "challenged"]
    parse_challenge(answer.headers["WWW-Authenticate"])  # a fresh one to pay


def test_charges_per_message(issuer: InvoiceIssuer, lnd: FakeLndServer, clock: Clock) -> None:
    gate = L402Gate(issuer, mode=Mode.PER_MESSAGE, price_msat=5_000)
    with L402InboxServer(gate) as inbox:
        first = post(inbox)
        _, credential = pay_for_priced(first, lnd, clock)
        assert post(inbox, credential).status_code == 202
        again = post(inbox, credential)
        assert again.status_code == 402
        _, second = pay_for_priced(again, lnd, clock)
        assert post(inbox, second).status_code == 202
    assert gate.decisions == [
        "challenged",
        "accepted",
        "refused: token already used",
        "challenged",
        "accepted",
    ]
    assert [p.amount_msat for p in lnd.node.payments()] == [5_000, 5_000]


def pay_for_priced(
    answer: requests.Response, lnd: FakeLndServer, clock: Clock
) -> tuple[L402Challenge, str]:
    challenge = parse_challenge(answer.headers["WWW-Authenticate"])
    terms = check_challenge(challenge, network="bcrt", max_price_msat=5_000, size=1, now=clock.now)
    client = LndRestClient(lnd.url, macaroon_hex=lnd.macaroon_hex, timeout=5)
    payment = client.pay(challenge.invoice, terms.pay_amount_msat, 0)
    return challenge, challenge.authorization(payment.preimage)


def test_reads_aperture_style_twin_challenges(
    issuer: InvoiceIssuer, lnd: FakeLndServer, clock: Clock
) -> None:
    gate = L402Gate(issuer, lsat_twin=True, price_msat=None)
    with L402InboxServer(gate) as inbox:
        answer = post(inbox)
        assert answer.headers["WWW-Authenticate"].startswith("LSAT ")
        challenge, credential = pay_for(answer, lnd, clock)
        assert challenge.scheme == "L402"
        assert post(inbox, credential).status_code == 202


def test_refuses_credentials_that_do_not_prove_payment(
    inbox: L402InboxServer, gate: L402Gate, issuer: InvoiceIssuer, lnd: FakeLndServer, clock: Clock
) -> None:
    challenge = parse_challenge(post(inbox).headers["WWW-Authenticate"])
    terms = check_challenge(challenge, network="bcrt", max_price_msat=10**9, size=1, now=clock.now)
    issued = issuer.registry.get(terms.invoice.payment_hash)
    assert issued is not None  # the payee's ledger: it knows the preimage
    # the right preimage, but the invoice was never paid
    assert post(inbox, challenge.authorization(issued.preimage)).status_code == 402
    # a preimage that does not hash to the macaroon's payment hash
    assert post(inbox, challenge.authorization(bytes(32))).status_code == 402
    # a macaroon minted with another root key for the same identifier
    forged_raw = macaroons.mint(b"k" * 32, bytes.fromhex("0000" + issued.payment_hash) + bytes(32))
    forged = base64.b64encode(forged_raw).decode()
    assert post(inbox, authorization(forged, issued.preimage)).status_code == 402
    # garbage
    assert post(inbox, "L402 !!!").status_code == 402
    assert gate.decisions[1::2] == [
        "refused: invoice not paid",
        "refused: preimage does not match the payment hash",
        "refused: macaroon not signed by this inbox",
        "refused: unreadable credential (InvalidCredentials)",
    ]


def test_the_demo_runs_the_network_in_a_process_of_its_own(clock: Clock) -> None:
    """``python -m testproject.lightning``: what the demo's workers will pay."""
    root = Path(__file__).resolve().parents[3]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testproject.lightning",
            "--mode",
            "per-message",
            "--price-msat",
            "0",
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        answer = requests.post(ready["inbox"], data=BODY, timeout=5)
        challenge = parse_challenge(answer.headers["WWW-Authenticate"])
        terms = check_challenge(challenge, network=ready["network"], max_price_msat=10**6, size=9)
        client = LndRestClient(ready["lnd_url"], macaroon_hex=ready["lnd_macaroon_hex"], timeout=5)
        payment = client.pay(challenge.invoice, terms.pay_amount_msat, 0)
        paid = requests.post(
            ready["inbox"],
            data=BODY,
            headers={"Authorization": challenge.authorization(payment.preimage)},
            timeout=5,
        )
        assert paid.status_code == 202
    finally:
        process.send_signal(signal.SIGTERM)
        _, errors = process.communicate(timeout=20)
    summary = json.loads(errors.strip().splitlines()[-1])
    assert summary == {"payments": 1, "decisions": {"challenged": 1, "accepted": 1}}

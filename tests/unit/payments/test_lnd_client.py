"""LndRestClient against the fake LND REST server.

Shapes from the LND API reference:
SendPaymentSync https://lightning.engineering/api-docs/api/lnd/lightning/send-payment-sync
(``POST /v1/channels/transactions``), TrackPaymentV2
https://lightning.engineering/api-docs/api/lnd/router/track-payment-v2
(``GET /v2/router/track/{payment_hash}``), ListPayments
https://lightning.engineering/api-docs/api/lnd/lightning/list-payments; an unknown hash
answers gRPC code 5 "payment isn't initiated" (lnbits/lnbits issue 1913).
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.payments.clients import PaymentClient, PaymentState
from django_outbox.payments.clients.lnd import LndRestClient
from django_outbox.payments.errors import (
    PaymentClientError,
    PaymentFailed,
    PaymentPending,
    PaymentUnauthorized,
    PreimageMismatch,
)
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode


def client_for(server: FakeLndServer, timeout: float = 5.0) -> LndRestClient:
    return LndRestClient(server.url, macaroon_hex=server.macaroon_hex, timeout=timeout)


def test_pays_an_invoice_and_proves_it(
    lnd: FakeLndServer, issuer: InvoiceIssuer, registry: InvoiceRegistry
) -> None:
    client = client_for(lnd)
    assert isinstance(client, PaymentClient)
    issued = issuer.invoice(21_000)
    payment = client.pay(issued.invoice, None, 1000)
    assert payment.preimage == issued.preimage
    assert hashlib.sha256(payment.preimage).hexdigest() == payment.payment_hash
    assert (payment.amount_msat, payment.fee_msat) == (21_000, 0)
    assert registry.is_paid(issued.payment_hash)
    call = lnd.calls[-1]
    assert (call.method, call.path) == ("POST", "/v1/channels/transactions")
    assert call.body == {"payment_request": issued.invoice, "fee_limit": {"fixed_msat": "1000"}}


def test_pays_an_amountless_invoice_the_amount_given(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    node.fee_msat = 7
    issued = issuer.invoice(None)
    payment = client_for(lnd).pay(issued.invoice, 12_345, 10)
    assert (payment.amount_msat, payment.fee_msat) == (12_345, 7)
    assert lnd.calls[-1].body["amt_msat"] == "12345"


def test_lookup_reports_a_completed_payment(lnd: FakeLndServer, issuer: InvoiceIssuer) -> None:
    client = client_for(lnd)
    issued = issuer.invoice(1000)
    client.pay(issued.invoice, None, 0)
    status = client.lookup(issued.payment_hash)
    assert status.state is PaymentState.COMPLETE
    assert status.payment is not None and status.payment.preimage == issued.preimage
    assert lnd.calls[-1].path.startswith("/v2/router/track/")


def test_a_payment_error_is_a_failure_when_the_node_says_failed(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    client = client_for(lnd)
    node.fail_next("no_route")
    issued = issuer.invoice(1000)
    with pytest.raises(PaymentFailed, match="no_route"):
        client.pay(issued.invoice, None, 0)
    assert client.lookup(issued.payment_hash).state is PaymentState.FAILED
    # a failed payment may be tried again, and this time it goes through
    assert client.pay(issued.invoice, None, 0).preimage == issued.preimage


def test_fees_over_the_limit_fail(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    node.fee_msat = 11
    with pytest.raises(PaymentFailed):
        client_for(lnd).pay(issuer.invoice(1000).invoice, None, 10)


def test_paying_again_returns_the_first_payment_without_paying_twice(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    client = client_for(lnd)
    issued = issuer.invoice(1000)
    first = client.pay(issued.invoice, None, 0)
    again = client.pay(issued.invoice, None, 0)  # LND: "invoice is already paid"
    assert again.preimage == first.preimage
    assert len(node.payments()) == 1


def test_timeout_after_paying_is_a_client_error_and_lookup_finds_the_payment(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    client = client_for(lnd, timeout=0.5)
    lnd.hang_after_paying = 3.0
    issued = issuer.invoice(1000)
    started = time.monotonic()
    with pytest.raises(PaymentClientError) as caught:
        client.pay(issued.invoice, None, 0)
    assert not isinstance(caught.value, PaymentFailed)
    assert time.monotonic() - started < 2.5
    assert len(node.payments()) == 1  # the money left all the same
    status = client.lookup(issued.payment_hash)
    assert status.state is PaymentState.COMPLETE
    assert status.payment is not None and status.payment.preimage == issued.preimage


def test_a_preimage_that_does_not_hash_to_the_payment_hash_is_refused(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    client = client_for(lnd)
    node.lie_about_preimage = True
    issued = issuer.invoice(1000)
    with pytest.raises(PreimageMismatch):
        client.pay(issued.invoice, None, 0)
    with pytest.raises(PreimageMismatch):
        client.lookup(issued.payment_hash)


def test_lookup_of_an_unknown_hash_is_unknown(lnd: FakeLndServer) -> None:
    status = client_for(lnd).lookup("ab" * 32)
    assert status.state is PaymentState.UNKNOWN


def test_in_flight_payments_are_pending(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    client = client_for(lnd)
    issued = issuer.invoice(1000)
    client.pay(issued.invoice, None, 0)
    node.set_status(issued.payment_hash, "pending")
    started = time.monotonic()
    assert client.lookup(issued.payment_hash).state is PaymentState.PENDING
    assert time.monotonic() - started < 0.2 + 1.0  # read the first update, not the whole stream
    with pytest.raises(PaymentPending):  # LND: "payment is in transition"
        client.pay(issued.invoice, None, 0)


def test_a_wrong_macaroon_is_unauthorized(lnd: FakeLndServer, issuer: InvoiceIssuer) -> None:
    client = LndRestClient(lnd.url, macaroon_hex="00" * 32, timeout=5)
    with pytest.raises(PaymentUnauthorized):
        client.pay(issuer.invoice(1000).invoice, None, 0)
    with pytest.raises(PaymentUnauthorized):
        client.lookup("ab" * 32)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_client_errors(
    lnd: FakeLndServer, issuer: InvoiceIssuer, node: FakeNode, status: int
) -> None:
    lnd.status_next = [status, status]
    issued = issuer.invoice(1000)
    with pytest.raises(PaymentClientError):
        client_for(lnd).pay(issued.invoice, None, 0)
    with pytest.raises(PaymentClientError):
        client_for(lnd).lookup(issued.payment_hash)
    assert node.payments() == []


def test_a_request_lnd_rejects_before_paying_is_a_client_error(
    lnd: FakeLndServer, issuer: InvoiceIssuer
) -> None:
    issued = issuer.invoice(1000)
    with pytest.raises(PaymentClientError, match="amount must not be specified"):
        client_for(lnd).pay(issued.invoice, 1000, 0)
    assert client_for(lnd).lookup(issued.payment_hash).state is PaymentState.UNKNOWN


def test_answers_read_to_their_end_keep_their_connection_and_streams_do_not(
    lnd: FakeLndServer, issuer: InvoiceIssuer
) -> None:
    client = client_for(lnd)
    for _ in range(3):
        assert client.lookup("ab" * 32).state is PaymentState.UNKNOWN
    issued = issuer.invoice(1000)
    client.pay(issued.invoice, None, 0)
    assert lnd.connections == 1
    # A payment's track answer is a stream, left after its first line: its connection
    # is closed, and the next call opens another.
    assert client.lookup(issued.payment_hash).state is PaymentState.COMPLETE
    assert client.lookup("cd" * 32).state is PaymentState.UNKNOWN
    assert lnd.connections == 2


def test_no_listener_is_a_client_error(issuer: InvoiceIssuer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = LndRestClient(f"http://127.0.0.1:{port}", macaroon_hex="00", timeout=1)
    with pytest.raises(PaymentClientError):
        client.pay(issuer.invoice(1000).invoice, None, 0)


def test_pins_lnds_tls_certificate(node: FakeNode, issuer: InvoiceIssuer, tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    cert = tmp_path / "tls.cert"
    ca.cert_pem.write_to_path(str(cert))
    macaroon = tmp_path / "admin.macaroon"
    with FakeLndServer(node, ssl_context=context) as server:
        macaroon.write_bytes(server.macaroon)
        pinned = LndRestClient(server.url, macaroon_path=macaroon, tls_cert_path=cert, timeout=5)
        issued = issuer.invoice(1000)
        assert pinned.pay(issued.invoice, None, 0).preimage == issued.preimage
        unpinned = LndRestClient(server.url, macaroon_path=macaroon, timeout=5)
        with pytest.raises(PaymentClientError):
            unpinned.lookup(issued.payment_hash)


@pytest.mark.parametrize(
    "options",
    [
        {"url": "http://127.0.0.1:1"},
        {"url": "http://127.0.0.1:1", "macaroon_hex": "00", "macaroon_path": "/x"},
        {"url": "http://127.0.0.1:1", "macaroon_hex": "zz"},
        {"url": "ftp://127.0.0.1:1", "macaroon_hex": "00"},
        {"url": "http://127.0.0.1:1", "macaroon_path": "/nonexistent/admin.macaroon"},
        {"url": "http://127.0.0.1:1", "macaroon_hex": "00", "timeout": 0},
    ],
)
def test_configuration_mistakes_are_reported(options: dict[str, Any]) -> None:
    with pytest.raises(OutboxConfigurationError):
        LndRestClient(**options)

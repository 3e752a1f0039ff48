"""ClnClient (pyln-client) against the fake Core Lightning JSON-RPC socket.

Shapes from the Core Lightning reference: ``pay``
https://docs.corelightning.org/reference/lightning-pay (``payment_preimage``,
``status`` complete/pending/failed; errors 205 no route, 207 expired, 210 timed out)
and ``listpays`` https://docs.corelightning.org/reference/lightning-listpays (``pays``
with ``status`` and ``preimage``).
"""

from __future__ import annotations

import sys
import time

import pytest

from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.payments.clients import PaymentClient, PaymentState
from django_outbox.payments.clients.cln import ClnClient, _rpc_class
from django_outbox.payments.errors import (
    PaymentClientError,
    PaymentFailed,
    PaymentPending,
    PreimageMismatch,
)
from testproject.lightning.cln import FakeClnServer
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.node import FakeNode

pytest.importorskip("pyln.client")


def client_for(server: FakeClnServer, timeout: float = 5.0) -> ClnClient:
    return ClnClient(server.path, timeout=timeout, retry_for=max(1, int(timeout) - 1))


def test_pays_an_invoice_and_proves_it(
    cln: FakeClnServer, issuer: InvoiceIssuer, registry: InvoiceRegistry, node: FakeNode
) -> None:
    node.fee_msat = 3
    client = client_for(cln)
    assert isinstance(client, PaymentClient)
    issued = issuer.invoice(8_000)
    payment = client.pay(issued.invoice, None, 50)
    assert payment.preimage == issued.preimage
    assert (payment.amount_msat, payment.fee_msat) == (8_000, 3)
    assert registry.is_paid(issued.payment_hash)
    method, params = cln.calls[-1]
    assert method == "pay"
    assert params == {"bolt11": issued.invoice, "maxfee": 50, "retry_for": 4}


def test_pays_an_amountless_invoice_the_amount_given(
    cln: FakeClnServer, issuer: InvoiceIssuer
) -> None:
    issued = issuer.invoice(None)
    assert client_for(cln).pay(issued.invoice, 4_321, 0).amount_msat == 4_321
    assert cln.calls[-1][1]["amount_msat"] == 4_321


def test_lookup_uses_listpays(cln: FakeClnServer, issuer: InvoiceIssuer, node: FakeNode) -> None:
    client = client_for(cln)
    issued = issuer.invoice(1000)
    assert client.lookup(issued.payment_hash).state is PaymentState.UNKNOWN
    node.fail_next("no_route")
    with pytest.raises(PaymentFailed):
        client.pay(issued.invoice, None, 0)
    assert client.lookup(issued.payment_hash).state is PaymentState.FAILED
    client.pay(issued.invoice, None, 0)
    status = client.lookup(issued.payment_hash)
    assert status.state is PaymentState.COMPLETE
    assert status.payment is not None and status.payment.preimage == issued.preimage
    assert cln.calls[-1] == ("listpays", {"payment_hash": issued.payment_hash})


def test_paying_again_returns_the_first_payment(
    cln: FakeClnServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    client = client_for(cln)
    issued = issuer.invoice(1000)
    assert client.pay(issued.invoice, None, 0) == client.pay(issued.invoice, None, 0)
    assert len(node.payments()) == 1


def test_an_expired_invoice_fails(
    cln: FakeClnServer, issuer: InvoiceIssuer, registry: InvoiceRegistry
) -> None:
    issued = issuer.invoice(1000, expiry=60, created_at=int(registry.clock()) - 120)
    with pytest.raises(PaymentFailed, match="207"):
        client_for(cln).pay(issued.invoice, None, 0)


def test_timeout_after_paying_is_a_client_error_and_lookup_finds_the_payment(
    cln: FakeClnServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    cln.hang_after_paying = 3.0
    issued = issuer.invoice(1000)
    started = time.monotonic()
    with pytest.raises(PaymentClientError) as caught:
        ClnClient(cln.path, timeout=1.5, retry_for=1).pay(issued.invoice, None, 0)
    assert not isinstance(caught.value, PaymentFailed)
    assert time.monotonic() - started < 2.8
    assert len(node.payments()) == 1
    status = client_for(cln).lookup(issued.payment_hash)
    assert status.state is PaymentState.COMPLETE


def test_a_lost_connection_is_a_client_error(cln: FakeClnServer, issuer: InvoiceIssuer) -> None:
    cln.drop_next = 1
    with pytest.raises(PaymentClientError):
        client_for(cln).pay(issuer.invoice(1000).invoice, None, 0)


def test_no_socket_is_a_client_error(issuer: InvoiceIssuer) -> None:
    client = ClnClient("/nonexistent/lightning-rpc", timeout=2, retry_for=1)
    with pytest.raises(PaymentClientError):
        client.pay(issuer.invoice(1000).invoice, None, 0)


def test_in_flight_payments_are_pending(
    cln: FakeClnServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    client = client_for(cln)
    issued = issuer.invoice(1000)
    client.pay(issued.invoice, None, 0)
    node.set_status(issued.payment_hash, "pending")
    assert client.lookup(issued.payment_hash).state is PaymentState.PENDING
    with pytest.raises(PaymentPending):
        client.pay(issued.invoice, None, 0)


def test_a_wrong_preimage_is_refused(
    cln: FakeClnServer, issuer: InvoiceIssuer, node: FakeNode
) -> None:
    node.lie_about_preimage = True
    issued = issuer.invoice(1000)
    with pytest.raises(PreimageMismatch):
        client_for(cln).pay(issued.invoice, None, 0)
    with pytest.raises(PreimageMismatch):
        client_for(cln).lookup(issued.payment_hash)


def test_retry_for_must_be_below_the_timeout() -> None:
    with pytest.raises(OutboxConfigurationError):
        ClnClient("/tmp/x", timeout=10, retry_for=10)


def test_without_pyln_client_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pyln.client", None)
    _rpc_class.cache_clear()
    try:
        with pytest.raises(OutboxConfigurationError, match=r"django-outbox\[cln\]"):
            _rpc_class()
    finally:
        _rpc_class.cache_clear()

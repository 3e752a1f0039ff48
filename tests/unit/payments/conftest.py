"""Fixtures for the paid-push unit tests: a fake Lightning network on loopback.

No Redis (``memory_caches`` keeps a worker's caches in memory).  One
:class:`~testproject.lightning.issuer.InvoiceRegistry`
is shared by the payee (issuer, L402 inbox) and the payer node (fake LND, fake Core
Lightning), so payments flow through real invoices, macaroons and preimages.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_outbox import outbox
from django_outbox.conf import conf
from django_outbox.models import Delivery
from django_outbox.payments import claims, paying
from django_outbox.payments.models import PaymentAttempt
from django_outbox.payments.paying import payment_client
from django_outbox.worker import process as worker_process
from testproject.lightning.cln import FakeClnServer
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.l402_inbox import L402Gate, L402InboxServer
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode
from tests.support.payment_rounds import PRICE, payments, round_of, send, serve


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test is a process of its own: no host met a 402 in it, no queue counted, no
    message kept (SQLite gives a rolled-back test's ids to the next test's rows)."""
    monkeypatch.setattr(paying, "_challenged", {})
    monkeypatch.setattr(claims, "_counted", {})
    if worker_process._process is not None:
        monkeypatch.setattr(worker_process._process, "_messages", OrderedDict())


class Clock:
    """A settable clock for the registry (invoice and token expiry)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(clock: Clock) -> InvoiceRegistry:
    return InvoiceRegistry(clock)


@pytest.fixture
def issuer(registry: InvoiceRegistry) -> InvoiceIssuer:
    return InvoiceIssuer(registry)


@pytest.fixture
def node(registry: InvoiceRegistry) -> FakeNode:
    return FakeNode(registry)


@pytest.fixture
def lnd(node: FakeNode) -> Iterator[FakeLndServer]:
    with FakeLndServer(node, stream_hold=0.2) as server:
        yield server


@pytest.fixture
def cln(node: FakeNode) -> Iterator[FakeClnServer]:
    with FakeClnServer(node) as server:
        yield server


@pytest.fixture
def memory_caches() -> Iterator[None]:
    """Caches in memory, for the tests that run a worker's steps without Redis."""
    from django_outbox.signing.schemes import forget_local

    memory = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=memory, OUTBOX_BREAKER_CACHE=None):
        forget_local()
        yield


@pytest.fixture
def configured(lnd: FakeLndServer) -> Iterator[None]:
    """``OUTBOX_PAYMENTS`` set, paying through ``lnd``."""
    with override_settings(OUTBOX_PAYMENTS=payments(lnd)):
        yield


@pytest.fixture
def inbox(issuer: InvoiceIssuer) -> Iterator[L402InboxServer]:
    """An L402 inbox that sells tokens, on loopback."""
    server = serve(issuer)
    yield server
    server.stop()


@pytest.fixture
def two_orphans(
    configured: None, inbox: L402InboxServer, issuer: InvoiceIssuer
) -> list[PaymentAttempt]:
    """Two pending attempts of two hosts (one paid at the node meanwhile) whose
    deliveries were given up."""
    other = L402InboxServer(L402Gate(issuer, price_msat=PRICE), "127.0.0.5").start()
    try:
        ids = send(inbox.url(), other.url())
        round_of(ids)
    finally:
        other.stop()
    attempts = list(PaymentAttempt.objects.order_by("id"))
    assert [a.state for a in attempts] == ["pending", "pending"]
    assert conf.PAYMENTS is not None
    paid = attempts[0]
    payment_client(conf.PAYMENTS).pay(paid.invoice, paid.pay_amount_msat, 100)
    outbox.give_up(Delivery.objects.filter(id__in=ids))
    return attempts

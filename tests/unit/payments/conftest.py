"""Fixtures for the paid-push unit tests: a fake Lightning network on loopback.

No Redis, no database.  One :class:`~testproject.lightning.issuer.InvoiceRegistry`
is shared by the payee (issuer, L402 inbox) and the payer node (fake LND, fake Core
Lightning), so payments flow through real invoices, macaroons and preimages.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from testproject.lightning.cln import FakeClnServer
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode


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

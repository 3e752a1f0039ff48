"""The fake Lightning network of the paid-push tests, and what they send and read.

An :class:`~testproject.lightning.issuer.InvoiceIssuer` signs the inboxes' invoices; a
:class:`~testproject.lightning.node.FakeNode` behind a fake LND REST server pays them
for the workers; both share one invoice registry, in this process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_outbox import outbox
from django_outbox.models import Delivery, DeliveryState
from testproject.demo.keys import ACTOR
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.l402_inbox import L402Gate, L402InboxServer
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode
from tests.support.chaos import NOTE

#: What the L402 inboxes of these tests charge, in millisatoshis.
PRICE = 10_000


#: ``start(count, **payments)``: the workers started (the ``start`` fixture).
Start = Callable[..., list[Any]]


class Lightning:
    """The fake network: an issuer for the inboxes, a node and its LND for the workers."""

    def __init__(self) -> None:
        self.registry = InvoiceRegistry()
        self.issuer = InvoiceIssuer(self.registry)
        self.node = FakeNode(self.registry)
        self.lnd = FakeLndServer(self.node, stream_hold=0.2).start()

    def settings(self, timeout: float = 10.0, **extra: Any) -> dict[str, Any]:
        """``OUTBOX_PAYMENTS`` for a worker paying through this network."""
        options = {"url": self.lnd.url, "macaroon_hex": self.lnd.macaroon_hex, "timeout": timeout}
        return {
            "CLIENT": "django_outbox.payments.clients.lnd.LndRestClient",
            "OPTIONS": options,
            "NETWORK": "bcrt",
            "MAX_FEE_MSAT": 100,
            **extra,
        }

    def inbox(self, host: str = "127.0.0.1", **gate: Any) -> L402InboxServer:
        """An L402 inbox (not started: use it in ``with``)."""
        options = {"price_msat": PRICE, **gate}
        return L402InboxServer(L402Gate(self.issuer, **options), host)


def send(*urls: str) -> list[int]:
    """Send one note to ``urls``; the ids of its deliveries, in order."""
    outbox.send(ACTOR, NOTE, list(urls))
    return list(Delivery.objects.filter(inbox__in=urls).order_by("id").values_list("id", flat=True))


def finished(ids: list[int]) -> bool:
    """Whether every delivery of ``ids`` is finished."""
    finished = (DeliveryState.DELIVERED, DeliveryState.REFUSED, DeliveryState.FAILED)
    return Delivery.objects.filter(id__in=ids, state__in=finished).count() == len(ids)


def states(ids: list[int]) -> list[str]:
    """The states of ``ids``, in order."""
    return list(Delivery.objects.filter(id__in=ids).order_by("id").values_list("state", flat=True))

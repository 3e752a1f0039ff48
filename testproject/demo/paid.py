"""The demo's paid host: an L402 gate on regtest invoices and the fake LND that pays them."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, F, Max, Sum
from django.db.models.functions import Coalesce

from django_outbox.payments.models import PaymentAttempt
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.l402_inbox import L402Gate, Mode
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode

#: What the paid host charges per message, in millisatoshis.
PRICE_MSAT = 2_000


class Lightning:
    """The paid host's side (an L402 gate issuing signed regtest invoices) and the
    worker's (a fake LND paying them), on one invoice registry, in this process."""

    def __init__(self) -> None:
        registry = InvoiceRegistry()
        self.gate = L402Gate(InvoiceIssuer(registry), mode=Mode.PER_MESSAGE, price_msat=PRICE_MSAT)
        self.node = FakeNode(registry)
        self.lnd = FakeLndServer(self.node)

    def settings(self) -> dict[str, Any]:
        """``OUTBOX_PAYMENTS`` of the worker: pay through the fake LND, on regtest."""
        options = {"url": self.lnd.url, "macaroon_hex": self.lnd.macaroon_hex, "timeout": 10}
        return {
            "OUTBOX_PAYMENTS": {
                "CLIENT": "django_outbox.payments.clients.lnd.LndRestClient",
                "OPTIONS": options,
                "NETWORK": "bcrt",
                "MAX_PRICE_MSAT": 10_000,
                "DAILY_BUDGET_MSAT": 1_000_000,
                "MAX_FEE_MSAT": 100,
            }
        }

    def summary(self, sent_at: float) -> str:
        """One line on the payments: what the ledger recorded and what the node paid."""
        rows = PaymentAttempt.objects.all()
        paid = rows.filter(paid_at__isnull=False).count()
        states = dict(rows.order_by().values_list("state").annotate(n=Count("id")))
        node = self.node.payments()
        last = rows.aggregate(last=Max("delivery__finished_at"))["last"]
        span = f", the last delivered {last.timestamp() - sent_at:.1f} s after send" if last else ""
        return (
            f"payments: {paid} paid ({', '.join(f'{n} {s}' for s, n in sorted(states.items()))}); "
            f"the node paid {len(node)} invoices, {sum(p.amount_msat for p in node):,} msat; "
            f"the L402 host accepted {self.gate.decisions.count('accepted')} paid requests{span}"
        )


def paid_msat(inboxes: list[str]) -> int:
    """What was paid (price and routing fees) for the deliveries to ``inboxes``."""
    paid = PaymentAttempt.objects.filter(delivery__inbox__in=inboxes, paid_at__isnull=False)
    totals = paid.aggregate(total=Coalesce(Sum(F("amount_msat") + F("fee_msat")), 0))
    return int(totals["total"])

"""The payer's node of the fake network, shared by the fake LND and Core Lightning.

It behaves as both real nodes do where it matters to a sender:

* validation before a payment starts (network, amount given for an amountless invoice
  and only then, expiry) is refused without recording anything;
* a payment hash that is in flight or settled is never paid twice;
* a failed payment is recorded as failed, and may be tried again;
* a payment succeeds by settling the invoice in the :class:`InvoiceRegistry`, which
  hands out the preimage.

Switches let tests script failures: :meth:`fail_next` (a route failure),
``fee_msat`` (routing fee charged), ``lie_about_preimage`` (answer a wrong preimage).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from django_outbox.payments.bolt11_reader import read_invoice
from testproject.lightning.issuer import InvoiceRegistry, Unpayable


class Refused(Exception):
    """The node refuses the call before any payment starts.  ``kind``: ``"invalid"``
    (bad request), ``"paid"`` (already settled), ``"in_flight"``."""

    def __init__(self, kind: str, message: str, payment_hash: str = "") -> None:
        super().__init__(message)
        self.kind, self.message, self.payment_hash = kind, message, payment_hash


@dataclass
class NodePayment:
    """One payment the node made or tried: ``status`` is complete, pending or failed."""

    payment_hash: str
    invoice: str = field(repr=False)
    amount_msat: int
    fee_msat: int
    status: str
    preimage: bytes = field(default=b"", repr=False)
    failure_reason: str = ""
    created_at: float = 0.0


class FakeNode:
    """A Lightning node that pays invoices of ``registry`` on ``network`` (``"bcrt"``)."""

    def __init__(self, registry: InvoiceRegistry, *, network: str = "bcrt", fee_msat: int = 0):
        self.registry, self.network, self.fee_msat = registry, network, fee_msat
        self.lie_about_preimage = False
        self._lock = threading.Lock()
        self._failures: list[str] = []
        self._payments: dict[str, NodePayment] = {}
        self.attempts: list[NodePayment] = []

    def fail_next(self, reason: str = "no_route", count: int = 1) -> None:
        """Make the next ``count`` payments fail with LND failure reason ``reason``."""
        with self._lock:
            self._failures += [reason] * count

    def payments(self) -> list[NodePayment]:
        """Completed payments, oldest first."""
        with self._lock:
            return [p for p in self.attempts if p.status == "complete"]

    def answered_preimage(self, payment: NodePayment) -> bytes:
        """The preimage the node tells the client (a wrong one if told to lie)."""
        return os.urandom(32) if self.lie_about_preimage else payment.preimage

    def lookup(self, payment_hash: str) -> NodePayment | None:
        """The node's record of ``payment_hash``: the latest attempt."""
        with self._lock:
            return self._payments.get(payment_hash)

    def set_status(self, payment_hash: str, status: str) -> None:
        """Force the recorded status of a payment (e.g. ``"pending"``, to test lookups)."""
        with self._lock:
            self._payments[payment_hash].status = status

    def pay(self, invoice: str, amount_msat: int | None, max_fee_msat: int) -> NodePayment:
        """Pay ``invoice``: the recorded attempt (complete or failed), or :class:`Refused`."""
        try:
            decoded = read_invoice(invoice)
        except Exception as exc:
            raise Refused("invalid", f"invalid payment request: {type(exc).__name__}") from None
        if decoded.currency != self.network:
            raise Refused("invalid", f"invoice not for current active network {self.network!r}")
        if decoded.amount_msat and amount_msat is not None:
            raise Refused("invalid", "amount must not be specified when paying a non-zero amount")
        if not decoded.amount_msat and amount_msat is None:
            raise Refused("invalid", "amount must be specified when paying a zero amount invoice")
        now = self.registry.clock()
        if now >= decoded.timestamp + decoded.expiry:
            raise Refused("invalid", "invoice expired")
        amount = int(decoded.amount_msat or amount_msat or 0)
        with self._lock:
            earlier = self._payments.get(decoded.payment_hash)
            if earlier is not None and earlier.status == "complete":
                raise Refused("paid", "invoice is already paid", earlier.payment_hash)
            if earlier is not None and earlier.status == "pending":
                raise Refused("in_flight", "payment is in transition", earlier.payment_hash)
            attempt = NodePayment(
                decoded.payment_hash, invoice, amount, 0, "failed", created_at=now
            )
            self._payments[attempt.payment_hash] = attempt
            self.attempts.append(attempt)
            if self._failures:
                attempt.failure_reason = self._failures.pop(0)
                return attempt
            if self.fee_msat > max_fee_msat:
                attempt.failure_reason = "no_route"
                return attempt
            try:
                attempt.preimage = self.registry.settle(attempt.payment_hash, amount)
            except Unpayable as refusal:
                attempt.failure_reason = refusal.reason
                return attempt
            attempt.status, attempt.fee_msat = "complete", self.fee_msat
            return attempt

"""The signals the ledger sends about payments: ``payment_made``, ``payment_failed``,
``payment_budget_exceeded``, each with the attempt's facts (never its secrets)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django_outbox.models import Delivery
from django_outbox.payments.models import PaymentAttempt
from django_outbox.payments.signals import payment_budget_exceeded, payment_failed, payment_made
from django_outbox.signals import send_logged


class PaymentSignals:
    """The payment signals of one batch of the ledger, gathered as it writes and sent
    (:meth:`send`) once it is committed, so that no receiver sees a change rolled back."""

    def __init__(self) -> None:
        self.made: list[int] = []  # attempt ids
        self.failed: list[tuple[int, str]] = []  # attempt id, reason
        self.over_budget: list[dict[str, Any]] = []

    def send(self) -> None:
        """Send what was gathered, reading the attempts and deliveries they name."""
        if self.made and payment_made.has_listeners(Delivery):
            for attempt in _attempts(self.made):
                send_logged(payment_made, Delivery, **_payment_args(attempt))
        if self.failed and payment_failed.has_listeners(Delivery):
            reasons = dict(self.failed)
            for attempt in _attempts(reasons):
                args = {**_payment_args(attempt), "reason": reasons[attempt.pk]}
                send_logged(payment_failed, Delivery, **args, paid=attempt.paid_at is not None)
        if self.over_budget and payment_budget_exceeded.has_listeners(Delivery):
            rows = Delivery.objects.in_bulk([n["delivery"] for n in self.over_budget])
            for note in self.over_budget:
                note["delivery"] = rows.get(note["delivery"])
                send_logged(payment_budget_exceeded, Delivery, **note)


def _attempts(ids: Iterable[int]) -> list[PaymentAttempt]:
    return list(PaymentAttempt.objects.filter(id__in=list(ids)).select_related("delivery"))


def _payment_args(attempt: PaymentAttempt) -> dict[str, Any]:
    return {
        "delivery": attempt.delivery,
        "amount_msat": attempt.amount_msat,
        "fee_msat": attempt.fee_msat,
        "payment_hash": attempt.payment_hash,
        "destination": attempt.destination,
        "actor": attempt.sender,
    }

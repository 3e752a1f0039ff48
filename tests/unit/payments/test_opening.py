"""Storing a challenge within the budget (:func:`~django_outbox.payments.opening.open_attempt`).

The price is reserved first (that reservation is the lock two stores for one sender
take turns at), yet a sender's budget holds back only a delivery that would pay: one
held while its host is paid, refused, or served a paid invoice again is judged so,
whatever is left of the day's budget, and the budget is as it was.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.db import transaction
from django.utils import timezone

from django_outbox.payments import budget
from django_outbox.payments.batches import LedgerBatch, Verdict
from django_outbox.payments.lookups import day_of, spent_today
from django_outbox.payments.models import PaymentAttempt, PaymentHost
from django_outbox.payments.opening import open_attempt
from django_outbox.payments.reports import PAYING_ELSEWHERE
from django_outbox.values.outcomes import AttemptResult
from testproject.demo.keys import ACTOR
from tests.support.payment_rounds import PRICE, send
from tests.unit.payments.test_bounds import SETTINGS
from tests.unit.payments.test_ledger_reads import HOST, attempt, challenge

pytestmark = pytest.mark.django_db

#: A day's budget with room for one payment (its price and the most fee) and no more.
ONE_PAYMENT = PRICE + SETTINGS.max_fee_msat


def _spent_all() -> LedgerBatch:
    """A batch whose sender has spent today's budget whole."""
    assert budget.reserve(ACTOR, day_of(timezone.now()), ONE_PAYMENT, ONE_PAYMENT)
    return LedgerBatch(replace(SETTINGS, daily_budget_msat=ONE_PAYMENT))


def _opened(batch: LedgerBatch, payment_hash: str) -> PaymentAttempt | Verdict:
    """Open the attempt of a new delivery to ``HOST`` for the invoice ``payment_hash``."""
    [pk] = send(f"https://{HOST}/inbox/{payment_hash[:8]}")
    with transaction.atomic():
        return open_attempt(pk, HOST, ACTOR, challenge(payment_hash), batch)


def test_a_delivery_held_while_its_host_is_paid_is_not_held_for_the_budget() -> None:
    batch = _spent_all()
    attempt("a" * 64, "pending", slot=0)  # the host's one payment under way
    held = _opened(batch, "b" * 64)
    assert isinstance(held, Verdict)
    assert (held.result, held.error) == (AttemptResult.HELD, PAYING_ELSEWHERE)
    assert batch.effects.signals.over_budget == []
    assert spent_today(ACTOR) == ONE_PAYMENT
    assert PaymentAttempt.objects.count() == 1


def test_a_delivery_that_would_pay_past_the_budget_is_held_to_the_next_day() -> None:
    batch = _spent_all()
    held = _opened(batch, "b" * 64)
    assert isinstance(held, Verdict)
    assert held.result == AttemptResult.HELD
    assert held.error.startswith("held: paying")
    assert [note["spent_msat"] for note in batch.effects.signals.over_budget] == [ONE_PAYMENT]
    assert spent_today(ACTOR) == ONE_PAYMENT
    assert not PaymentAttempt.objects.exists()


def test_a_stored_attempt_keeps_its_reservation_and_a_refusal_gives_it_back() -> None:
    PaymentHost.objects.create(host=HOST, per_message=True)  # a slot for each
    batch = LedgerBatch(replace(SETTINGS, daily_budget_msat=10 * ONE_PAYMENT))
    stored = _opened(batch, "b" * 64)
    assert isinstance(stored, PaymentAttempt) and stored.reserved_msat == ONE_PAYMENT
    assert spent_today(ACTOR) == ONE_PAYMENT
    paid = attempt("c" * 64, "used", host="127.0.0.9", paid_at=timezone.now())
    refused = _opened(batch, paid.payment_hash)  # a paid invoice served again
    assert isinstance(refused, Verdict) and refused.result == AttemptResult.REFUSED
    assert "invoice_already_paid" in refused.error
    assert spent_today(ACTOR) == ONE_PAYMENT

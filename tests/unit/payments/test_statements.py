"""The payment statements written out (:mod:`django_outbox.payments.statements`): they
store and read what the ORM would have, on either database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_outbox.payments import attempt_statements
from django_outbox.payments.lookups import host_charges
from django_outbox.payments.models import PaymentAttempt, PaymentHost
from django_outbox.payments.statements import insert
from testproject.demo.keys import ACTOR
from tests.support.payment_rounds import PRICE

pytestmark = pytest.mark.django_db

HOST = "127.0.0.5"


def unsaved(payment_hash: str, slot: int = 3) -> PaymentAttempt:
    """An attempt at ``HOST`` not stored yet, with the defaults left to the model."""
    now = timezone.now()
    return PaymentAttempt(
        sender=ACTOR,
        host=HOST,
        destination=f"https://{HOST}/inbox",
        invoice="lnbcrt1" + payment_hash[:20],
        macaroon="m",
        payment_hash=payment_hash,
        amount_msat=PRICE,
        reserved_msat=PRICE + 100,
        created_at=now,
        invoice_expires_at=now + timedelta(minutes=10, microseconds=7),
        expires_at=now + timedelta(hours=1),
        slot=slot,
    )


def columns(row: PaymentAttempt) -> dict[str, object]:
    """Every stored value of ``row`` but its key, payment hash and invoice."""
    skip = {"id", "payment_hash", "invoice"}
    return {
        f.attname: getattr(row, f.attname)
        for f in row._meta.concrete_fields
        if f.attname not in skip
    }


def test_an_insert_stores_what_the_orm_would_and_hands_the_row_back_saved() -> None:
    twin = unsaved("b" * 64, slot=4)
    twin.save()
    row = insert(unsaved("a" * 64))
    assert row.pk is not None and not row._state.adding
    stored = PaymentAttempt.objects.get(payment_hash="a" * 64)
    assert stored.pk == row.pk
    assert columns(stored) == columns(PaymentAttempt.objects.get(pk=twin.pk)) | {
        "created_at": row.created_at,
        "invoice_expires_at": row.invoice_expires_at,
        "expires_at": row.expires_at,
        "slot": 3,
    }
    assert (stored.state, stored.uses, stored.paid_at, stored.slot) == ("pending", 0, None, 3)
    assert stored.invoice_expires_at == row.invoice_expires_at  # microseconds kept


@pytest.mark.django_db(transaction=True)
def test_an_insert_a_unique_key_refuses_stores_nothing_and_the_transaction_goes_on() -> None:
    with transaction.atomic():
        first = insert(unsaved("a" * 64, slot=3))
        assert insert(unsaved("a" * 64, slot=4)) is None  # its payment hash
        assert insert(unsaved("b" * 64, slot=3)) is None  # a pending payment in its slot
        assert insert(unsaved("c" * 64, slot=5)) is not None  # no savepoint to roll back to
    assert first is not None
    stored = PaymentAttempt.objects.order_by("slot").values_list("payment_hash", "slot")
    assert list(stored) == [("a" * 64, 3), ("c" * 64, 5)]


def test_how_a_host_charges_is_read_as_a_bool_or_none() -> None:
    assert host_charges(HOST) is None
    PaymentHost.objects.create(host=HOST, per_message=True)
    PaymentHost.objects.create(host="127.0.0.6", per_message=False)
    assert host_charges(HOST) is True
    assert host_charges("127.0.0.6") is False


def test_a_payment_is_written_only_over_the_state_it_was_read_in() -> None:
    row = insert(unsaved("a" * 64))
    read = attempt_statements.payable(row.pk)
    assert read is not None and (read.state, read.host, read.sender) == ("pending", HOST, ACTOR)
    stored = PaymentAttempt.objects.get(pk=row.pk)
    columns = ("pk", "amount_msat", "reserved_msat", "uses", "created_at")
    assert [getattr(read, column) for column in columns] == [
        getattr(stored, column) for column in columns
    ]
    assert attempt_statements.mark_paid(read, "00" * 32, 5, timezone.now(), PRICE + 5)
    assert not attempt_statements.mark_paid(read, "11" * 32, 9, timezone.now(), PRICE + 9)
    assert attempt_statements.payable(row.pk) is None
    row.refresh_from_db()
    assert (row.state, row.preimage, row.fee_msat, row.reserved_msat) == (
        "paid",
        "00" * 32,
        5,
        PRICE + 5,
    )
    assert attempt_statements.mark_used(row.pk, (timezone.now(), "opens one delivery"))
    assert not attempt_statements.mark_used(row.pk)  # used already: only paid ones are
    attempt_statements.count_use(row.pk)
    row.refresh_from_db()
    assert (row.state, row.uses, row.reason) == ("used", 2, "opens one delivery")
    assert row.retired_at is not None


def test_a_payment_whose_token_opened_its_one_delivery_is_used_and_retired_at_once() -> None:
    row = insert(unsaved("b" * 64))
    read = attempt_statements.payable(row.pk)
    assert read is not None
    now = timezone.now()
    assert attempt_statements.mark_paid(read, "22" * 32, 3, now, PRICE + 3, "opens one")
    assert not attempt_statements.mark_used(row.pk)  # not paid any more: used
    row.refresh_from_db()
    assert (row.state, row.uses, row.reason, row.preimage, row.reserved_msat) == (
        "used",
        1,
        "opens one",
        "22" * 32,
        PRICE + 3,
    )
    assert row.paid_at == row.retired_at == now

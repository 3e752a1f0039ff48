"""The BOLT11 reader and the fake network's writer against the ``bolt11`` package."""

from __future__ import annotations

import hashlib
import os

import bolt11
import pytest
from bolt11 import Bolt11, MilliSatoshi, TagChar, Tags
from coincurve import PrivateKey

from testproject.lightning.bolt11_reader import read_invoice
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry

KEY = bytes(range(1, 33))
PAYEE = PrivateKey(KEY).public_key.format(compressed=True).hex()


def make(
    amount_msat: int | None = 10_000,
    *,
    currency: str = "bcrt",
    payee: str = "",
    description: str | None = "a note",
    description_hash: str | None = None,
    secret: bool = True,
    expiry: int | None = 600,
    extra: Tags | None = None,
) -> str:
    """An invoice signed with ``KEY``; ``payee`` (hex) is written as its ``n`` field."""
    tags = extra or Tags()
    tags.add(TagChar.payment_hash, hashlib.sha256(os.urandom(32)).hexdigest())
    if secret:
        tags.add(TagChar.payment_secret, os.urandom(32).hex())
    if description is not None:
        tags.add(TagChar.description, description)
    if description_hash is not None:
        tags.add(TagChar.description_hash, description_hash)
    if expiry is not None:
        tags.add(TagChar.expire_time, expiry)
    if payee:
        tags.add(TagChar.payee, payee)
    amount = MilliSatoshi(amount_msat) if amount_msat else None
    unsigned = Bolt11(currency=currency, date=1_700_000_000, tags=tags, amount_msat=amount)
    encoded = bolt11.encode(
        unsigned, private_key=KEY.hex(), ignore_exceptions=True, keep_payee=bool(payee)
    )
    return str(encoded)


def same_as_bolt11(invoice: str) -> None:
    mine, theirs = read_invoice(invoice), bolt11.decode(invoice)
    assert mine.currency == theirs.currency
    assert mine.amount_msat == theirs.amount_msat
    assert mine.timestamp == theirs.date
    assert mine.payment_hash == theirs.payment_hash
    assert mine.payment_secret == theirs.payment_secret
    assert mine.expiry == theirs.expiry
    assert mine.payee == theirs.payee == PAYEE


@pytest.mark.parametrize("amount", [None, 1, 10, 1_000, 10_000, 123_456_789, 2 * 10**11])
@pytest.mark.parametrize("currency", ["bc", "tb", "tbs", "bcrt"])
def test_reads_what_bolt11_reads(amount: int | None, currency: str) -> None:
    same_as_bolt11(make(amount, currency=currency))


def test_checks_the_signature_against_the_payee_field() -> None:
    same_as_bolt11(make(payee=PAYEE))
    other = PrivateKey(bytes(range(2, 34))).public_key.format(compressed=True).hex()
    forged = make(payee=other)  # signed with KEY, naming another payee
    with pytest.raises(bolt11.Bolt11Exception):
        bolt11.decode(forged)
    with pytest.raises(ValueError):
        read_invoice(forged)


def test_a_description_hash_and_the_default_expiry() -> None:
    invoice = make(description=None, description_hash="ab" * 32, expiry=None)
    same_as_bolt11(invoice)
    assert read_invoice(invoice).expiry == 3600


def test_an_empty_description_is_one() -> None:
    same_as_bolt11(make(description=""))


def test_unknown_fields_are_skipped() -> None:
    extra = Tags()
    extra.add(TagChar.metadata, "00ff")
    same_as_bolt11(make(extra=extra))


@pytest.mark.parametrize("options", [{"secret": False}, {"description": None}])
def test_refuses_what_bolt11_refuses(options: dict[str, object]) -> None:
    invoice = make(**options)  # type: ignore[arg-type]
    with pytest.raises(bolt11.Bolt11Exception):
        bolt11.decode(invoice)
    with pytest.raises(ValueError):
        read_invoice(invoice)


def test_refuses_broken_text() -> None:
    good = make()
    flipped = good[:-10] + ("q" if good[-10] != "q" else "p") + good[-9:]
    mixed = good[:6] + good[6:].upper()
    for bad in [flipped, good[:-1], mixed, "lnbcrt1", "hello", "lnxx1" + good.split("1", 1)[1]]:
        with pytest.raises(ValueError):
            read_invoice(bad)


def test_refuses_a_sub_millisatoshi_amount() -> None:
    invoice = make().replace("lnbcrt100n1", "lnbcrt1p1", 1)
    with pytest.raises(ValueError):
        read_invoice(invoice)


@pytest.mark.parametrize("amount", [None, 1, 10, 1_000, 123_456_789, 2 * 10**11])
def test_the_fake_networks_invoices_are_what_bolt11_reads(amount: int | None) -> None:
    """testproject's writer (the gates' invoices) against bolt11's decoder."""
    issued = InvoiceIssuer(InvoiceRegistry(), node_key=KEY).invoice(amount, expiry=900)
    theirs = bolt11.decode(issued.invoice)
    assert issued.invoice == issued.invoice.lower()
    assert (theirs.currency, theirs.amount_msat, theirs.payee) == ("bcrt", amount, PAYEE)
    assert (theirs.payment_hash, theirs.expiry) == (issued.payment_hash, 900)
    assert theirs.date + theirs.expiry == issued.expires_at
    assert theirs.description == "django_outbox test inbox"
    assert theirs.tags.get(TagChar.min_final_cltv_expiry).data == 40
    same_as_bolt11(issued.invoice)

"""The package's BOLT11 reader and the fake network's writer against the ``bolt11``
package: fixed invoices, and random alterations of them."""

from __future__ import annotations

import hashlib
import os

import bolt11
import pytest
from bolt11 import Bolt11, MilliSatoshi, TagChar, Tags
from coincurve import PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from django_outbox.payments.bolt11_reader import CHARSET, expand, polymod, read_invoice
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


def rechecked(hrp: str, words: list[int]) -> str:
    """Bech32 text of ``hrp`` and ``words`` with a valid checksum: an altered invoice that
    reaches the field parser and the signature check instead of failing the checksum."""
    value = polymod([*expand(hrp), *words, 0, 0, 0, 0, 0, 0]) ^ 1
    checksum = [(value >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(CHARSET[word] for word in [*words, *checksum])


def agree(text: str) -> None:
    """The reader and ``bolt11`` both refuse ``text``, or both read the same fields."""
    try:
        theirs = bolt11.decode(text)
    except Exception:
        theirs = None
    try:
        mine = read_invoice(text)
    except ValueError:
        mine = None
    assert (mine is None) == (theirs is None), (text, mine, theirs)
    if mine is not None and theirs is not None:
        assert mine.amount_msat == theirs.amount_msat
        assert (mine.currency, mine.timestamp) == (theirs.currency, theirs.date)
        assert (mine.payment_hash, mine.payment_secret) == (
            theirs.payment_hash,
            theirs.payment_secret,
        )
        assert (mine.expiry, mine.payee) == (theirs.expiry, theirs.payee)


WELL_FORMED = [make(), make(None, payee=PAYEE), make(description=None, description_hash="cd" * 32)]


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from(WELL_FORMED),
    changes=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=31)),
        min_size=1,
        max_size=4,
    ),
    cut=st.integers(min_value=0, max_value=8),
)
def test_an_altered_invoice_is_read_as_bolt11_reads_it(
    base: str, changes: list[tuple[int, int]], cut: int
) -> None:
    """Words changed anywhere before the checksum (the timestamp, a field's tag, its
    length or its value, the signature), some cut off the end, and a checksum made
    valid again: whatever ``bolt11`` refuses is refused, what it reads is read alike."""
    hrp, _, data = base.rpartition("1")
    words = [CHARSET.index(char) for char in data[:-6]]
    for at, word in changes:
        words[at % len(words)] = word
    agree(rechecked(hrp, words[: len(words) - cut]))


@settings(max_examples=200, deadline=None)
@given(amount=st.from_regex(r"[0-9]{1,14}[munp]?", fullmatch=True))
def test_an_amount_is_read_as_bolt11_reads_it_or_refused_when_not_whole_msat(amount: str) -> None:
    """Any amount text: the same millisatoshis as ``bolt11``, except the sub-millisatoshi
    ones it rounds down, which the reader refuses (LND and Core Lightning do)."""
    invoice = make().replace("lnbcrt100n1", f"lnbcrt{amount}1", 1)
    hrp, _, data = invoice.rpartition("1")
    words = [CHARSET.index(char) for char in data[:-6]]
    text = rechecked(hrp, words)
    if amount.endswith("p") and int(amount[:-1]) % 10:
        with pytest.raises(ValueError):
            read_invoice(text)
        return
    agree(text)

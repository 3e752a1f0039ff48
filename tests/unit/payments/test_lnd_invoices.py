"""The decoder against invoices LND made: the amount checked is the amount LND pays.

``decode_invoice`` reads with the package's own reader (compared with the ``bolt11``
package in ``test_bolt11_reader.py``); these invoices and LND's own reading of them are in
``tests/support/lnd_invoices.py``, with where they come from.
"""

from __future__ import annotations

import os

import pytest

from django_outbox.payments.bolt11_reader import read_invoice
from django_outbox.payments.errors import InvoiceRefused, Reason
from django_outbox.payments.invoices import check_invoice, decode_invoice
from testproject.lightning.bolt11_writer import write_invoice
from tests.support.lnd_invoices import (
    ENCODED_BY_LND,
    FROM_AN_LND_NODE,
    LND_TEST_HASH,
    LND_TEST_PAYEE,
    LND_TEST_TIMESTAMP,
    WITHOUT_PAYMENT_ADDRESS,
    LndInvoice,
)

ALL = [*ENCODED_BY_LND, FROM_AN_LND_NODE]


@pytest.mark.parametrize("made", ENCODED_BY_LND, ids=lambda made: made.what)
def test_reads_what_lnd_reads(made: LndInvoice) -> None:
    decoded = decode_invoice(made.invoice)
    assert made.invoice.startswith(f"lnbc{made.amount}1")
    assert decoded.network == "bc"
    assert decoded.amount_msat == made.msat
    assert decoded.payment_hash == LND_TEST_HASH
    assert decoded.payee == LND_TEST_PAYEE
    assert decoded.created_at == LND_TEST_TIMESTAMP
    assert decoded.expiry == 3600  # no x field: LND's default


def test_reads_an_invoice_of_a_running_lnd_node_as_an_independent_reader_does() -> None:
    decoded = decode_invoice(FROM_AN_LND_NODE.invoice)
    other = read_invoice(FROM_AN_LND_NODE.invoice)  # the test network's own BOLT11 reader
    assert (
        (decoded.network, decoded.amount_msat)
        == ("bcrt", 50_000_000)
        == (
            other.currency,
            other.amount_msat,
        )
    )
    assert decoded.payment_hash == other.payment_hash
    assert decoded.payee == other.payee
    assert (
        (decoded.created_at, decoded.expiry)
        == (other.timestamp, other.expiry)
        == (
            1735891263,
            86400,
        )
    )


@pytest.mark.parametrize("made", ALL, ids=lambda made: made.what)
def test_the_price_checked_is_what_lnd_pays(made: LndInvoice) -> None:
    decoded = decode_invoice(made.invoice)
    now = decoded.created_at + 60  # the invoice is young
    terms = check_invoice(
        decoded, network=decoded.network, max_price_msat=made.msat, size=100, now=now
    )
    assert terms.amount_msat == made.msat
    assert terms.pay_amount_msat is None  # the invoice names its amount: the node pays it
    with pytest.raises(InvoiceRefused) as refused:
        check_invoice(
            decoded, network=decoded.network, max_price_msat=made.msat - 1, size=100, now=now
        )
    assert refused.value.reason is Reason.OVER_PRICE


def test_an_invoice_lnd_will_not_pay_for_want_of_a_payment_address_is_refused() -> None:
    with pytest.raises(InvoiceRefused) as refused:
        decode_invoice(WITHOUT_PAYMENT_ADDRESS)
    assert refused.value.reason is Reason.INVOICE_UNDECODABLE


@pytest.mark.parametrize(
    ("amount", "msat"),
    [("10p", 1), ("20p", 2), ("1230p", 123), ("15p", None), ("1p", None), ("99999p", None)],
)
def test_a_pico_amount_is_paid_only_in_whole_millisatoshis(amount: str, msat: int | None) -> None:
    """LND (``pBtcToMSat``) and Core Lightning refuse ``15p``; the ``bolt11`` package
    reads it as 1 msat, a price the node would not pay."""
    invoice = write_invoice(
        os.urandom(32),
        network="bcrt",
        amount_msat=1,
        amount_text=amount,
        timestamp=1_700_000_000,
        payment_hash=os.urandom(32).hex(),
        payment_secret=os.urandom(32).hex(),
        description="pico",
        expiry=600,
    )
    assert invoice.startswith(f"lnbcrt{amount}1")
    if msat is None:
        with pytest.raises(InvoiceRefused, match="sub-millisatoshi") as refused:
            decode_invoice(invoice)
        assert refused.value.reason is Reason.INVOICE_UNDECODABLE
    else:
        assert decode_invoice(invoice).amount_msat == msat

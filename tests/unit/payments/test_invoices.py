"""Decoding BOLT11 invoices and deciding what to pay, on real signed regtest invoices."""

from __future__ import annotations

import base64

import pytest
from django.test import override_settings

from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.payments.challenge import parse_challenge
from django_outbox.payments.errors import ChallengeRefused, InvoiceRefused, Reason
from django_outbox.payments.invoices import (
    EXPIRY_AFFORDANCE,
    check_challenge,
    check_invoice,
    check_network,
    decode_invoice,
    macaroon_payment_hash,
    push_amount,
)
from testproject.lightning import macaroons
from testproject.lightning.issuer import InvoiceIssuer, InvoiceRegistry
from testproject.lightning.lnd import FakeLndServer
from tests.support.payment_rounds import payments

from .conftest import Clock


def refusal(**options: object) -> Reason:
    with pytest.raises(InvoiceRefused) as caught:
        check_invoice(**options)  # type: ignore[arg-type]
    return caught.value.reason


def test_decodes_a_signed_regtest_invoice(issuer: InvoiceIssuer) -> None:
    issued = issuer.invoice(10_000, expiry=600)
    decoded = decode_invoice(issued.invoice)
    assert issued.invoice.startswith("lnbcrt100n1")  # 10 sat = 100 nano-BTC
    assert decoded.network == "bcrt"
    assert decoded.amount_msat == 10_000
    assert decoded.payment_hash == issued.payment_hash
    assert decoded.payee == issuer.node_id
    assert decoded.expires_at == issued.expires_at


def test_amountless_invoices_have_no_amount(issuer: InvoiceIssuer) -> None:
    issued = issuer.invoice(None)
    assert issued.invoice.startswith("lnbcrt1")
    assert decode_invoice(issued.invoice).amount_msat is None


def test_amountless_price_is_max_of_minimum_and_size_times_rate() -> None:
    assert push_amount(5) == 1000  # 5 x 100 < the 1,000 msat minimum
    assert push_amount(2_000) == 200_000
    assert push_amount(2_000, rate_msat_per_byte=3, minimum_msat=10_000) == 10_000
    assert push_amount(20_000, rate_msat_per_byte=3, minimum_msat=10_000) == 60_000
    with pytest.raises(ValueError):
        push_amount(-1)


def test_terms_of_an_amountless_invoice(issuer: InvoiceIssuer, clock: Clock) -> None:
    invoice = issuer.invoice(None).invoice
    terms = check_invoice(
        invoice, network="bcrt", max_price_msat=500_000, size=3_000, now=clock.now
    )
    assert terms.amount_msat == terms.pay_amount_msat == 300_000


def test_terms_of_an_invoice_with_an_amount(issuer: InvoiceIssuer, clock: Clock) -> None:
    invoice = issuer.invoice(42_000).invoice
    terms = check_invoice(invoice, network="bcrt", max_price_msat=42_000, size=10, now=clock.now)
    assert terms.amount_msat == 42_000
    assert terms.pay_amount_msat is None  # the invoice names it: nodes refuse an amount


def test_refuses_over_the_price_cap(issuer: InvoiceIssuer, clock: Clock) -> None:
    dear = issuer.invoice(42_001).invoice
    assert refusal(invoice=dear, network="bcrt", max_price_msat=42_000, size=1, now=clock.now) is (
        Reason.OVER_PRICE
    )
    amountless = issuer.invoice(None).invoice
    assert (
        refusal(invoice=amountless, network="bcrt", max_price_msat=99_999, size=1000, now=clock.now)
        is Reason.OVER_PRICE
    )


def test_refuses_another_network(registry: InvoiceRegistry, clock: Clock) -> None:
    mainnet = InvoiceIssuer(registry, network="bc").invoice(1000).invoice
    assert mainnet.startswith("lnbc10n1")
    assert refusal(invoice=mainnet, network="bcrt", max_price_msat=10**6, size=1) is (
        Reason.WRONG_NETWORK
    )
    testnet = InvoiceIssuer(registry, network="tb").invoice(1000).invoice
    assert check_invoice(testnet, network="tb", max_price_msat=10**6, size=1, now=clock.now)


def test_expiry_keeps_an_affordance(issuer: InvoiceIssuer, clock: Clock) -> None:
    issued = issuer.invoice(1000, expiry=100)
    options = {"invoice": issued.invoice, "network": "bcrt", "max_price_msat": 10**6, "size": 1}
    just_in_time = issued.expires_at - EXPIRY_AFFORDANCE - 1
    assert check_invoice(**options, now=just_in_time)  # type: ignore[arg-type]
    assert refusal(**options, now=issued.expires_at - EXPIRY_AFFORDANCE) is Reason.INVOICE_EXPIRED
    assert refusal(**options, now=issued.expires_at + 1) is Reason.INVOICE_EXPIRED
    assert check_invoice(**options, now=issued.expires_at - 2, affordance=1)  # type: ignore[arg-type]


def test_refuses_an_invoice_already_expired(issuer: InvoiceIssuer, clock: Clock) -> None:
    old = issuer.invoice(1000, expiry=3600, created_at=int(clock.now) - 7200).invoice
    assert refusal(invoice=old, network="bcrt", max_price_msat=10**6, size=1) is (
        Reason.INVOICE_EXPIRED
    )
    assert decode_invoice(old).is_expired()


def test_refuses_undecodable_invoices(issuer: InvoiceIssuer) -> None:
    good = issuer.invoice(1000).invoice
    flipped = good[:-10] + ("q" if good[-10] != "q" else "p") + good[-9:]
    for bad in ["lnbcrt1", "hello", flipped, good[:-1], "x" * 100, good + "é"]:
        with pytest.raises(InvoiceRefused) as caught:
            decode_invoice(bad)
        assert caught.value.reason is Reason.INVOICE_UNDECODABLE, bad
    with pytest.raises(InvoiceRefused) as caught:
        decode_invoice("lnbcrt1" + "q" * 10_000)
    assert caught.value.reason is Reason.INVOICE_TOO_LARGE


def test_checks_the_hash_the_macaroon_names(issuer: InvoiceIssuer, clock: Clock) -> None:
    challenge = parse_challenge(issuer.challenge(5000).header)
    terms = check_challenge(challenge, network="bcrt", max_price_msat=5000, size=1, now=clock.now)
    assert terms.invoice.payment_hash == macaroon_payment_hash(challenge)

    other = issuer.invoice(5000)
    swapped = parse_challenge(f'L402 macaroon="{challenge.macaroon}", invoice="{other.invoice}"')
    with pytest.raises(InvoiceRefused) as caught:
        check_challenge(swapped, network="bcrt", max_price_msat=5000, size=1, now=clock.now)
    assert caught.value.reason is Reason.HASH_MISMATCH


def test_refuses_a_macaroon_that_is_not_an_l402_token(issuer: InvoiceIssuer) -> None:
    invoice = issuer.invoice(5000).invoice
    raw = macaroons.mint(b"k" * 32, b"not an l402 identifier")
    challenge = parse_challenge(
        f'L402 macaroon="{base64.b64encode(raw).decode()}", invoice="{invoice}"'
    )
    with pytest.raises(ChallengeRefused) as caught:
        check_challenge(challenge, network="bcrt", max_price_msat=5000, size=1)
    assert caught.value.reason is Reason.MACAROON_INVALID


def test_network_must_be_a_bolt11_prefix() -> None:
    for network in ("bc", "tb", "tbs", "bcrt"):
        assert check_network(network) == network
    with pytest.raises(OutboxConfigurationError):
        check_network("regtest")


def test_an_invoice_decoded_again_is_not_verified_again(
    issuer: InvoiceIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_outbox.payments import bolt11_reader

    calls: list[str] = []
    read = bolt11_reader.read_invoice

    def counted(text: str) -> object:
        calls.append(text)
        return read(text)

    monkeypatch.setattr(bolt11_reader, "read_invoice", counted)
    first, second = issuer.invoice(1_000).invoice, issuer.invoice(2_000).invoice
    assert decode_invoice(first) is decode_invoice(first)
    assert decode_invoice(second).amount_msat == 2_000
    assert calls == [first, second]


def test_a_refused_invoice_is_refused_each_time_it_is_decoded(issuer: InvoiceIssuer) -> None:
    forged = issuer.invoice(1_000).invoice[:-8] + "qqqqqqqq"
    for _ in range(2):
        with pytest.raises(InvoiceRefused) as caught:
            decode_invoice(forged)
        assert caught.value.reason is Reason.INVOICE_UNDECODABLE


def test_a_worker_imports_the_decoder_as_it_starts_when_payments_are_on(
    monkeypatch: pytest.MonkeyPatch, lnd: FakeLndServer
) -> None:
    import django_outbox.tasks as tasks
    from django_outbox.payments import extension

    loaded: list[bool] = []
    monkeypatch.setattr(extension, "load_decoder", lambda: loaded.append(True))
    tasks._start_extensions()
    assert loaded == [], "payments off: nothing to import"
    with override_settings(OUTBOX_PAYMENTS=payments(lnd)):
        tasks._start_extensions()
    assert loaded == [True]

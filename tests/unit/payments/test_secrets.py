"""Preimages and macaroons never show in ``repr``, ``str``, error messages or logs.

With the macaroon, a preimage is a bearer credential: whoever reads both in a log can
use the paid token.  Every object and error of the payments package is rendered here
and searched for every spelling of the secrets (hex, base64, bytes repr).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest

from django_outbox.payments import errors
from django_outbox.payments.challenge import parse_authorization, parse_challenge
from django_outbox.payments.clients import PaymentState, PaymentStatus
from django_outbox.payments.clients.cln import ClnClient
from django_outbox.payments.clients.lnd import LndRestClient
from django_outbox.payments.invoices import check_challenge, decode_invoice
from django_outbox.payments.macaroons import decode_macaroon
from testproject.lightning.cln import FakeClnServer
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode


def spellings(secret: bytes) -> list[str]:
    """Every way a secret could be written out (8 characters of hex are allowed)."""
    text = base64.b64encode(secret).decode()
    return [
        secret.hex()[:9],
        secret.hex().upper()[:9],
        text[:12],
        base64.urlsafe_b64encode(secret).decode()[:12],
        repr(secret)[2:14],
        text[4:16],  # past the macaroon's common prefix
    ]


def assert_hidden(objects: Iterable[Any], secrets: Iterable[bytes]) -> None:
    words = [w for s in secrets for w in spellings(s)]
    for obj in objects:
        for rendered in (repr(obj), str(obj)):
            leaked = [w for w in words if w in rendered]
            assert not leaked, f"{type(obj).__name__} shows a secret: {rendered!r}"


def test_nothing_we_define_shows_a_preimage_or_a_macaroon(
    issuer: InvoiceIssuer, lnd: FakeLndServer, cln: FakeClnServer, node: FakeNode
) -> None:
    issued_challenge = issuer.challenge(2000)
    challenge = parse_challenge(issued_challenge.header)
    preimage = issued_challenge.invoice.preimage
    macaroon = challenge.macaroon_bytes
    lnd_client = LndRestClient(lnd.url, macaroon_hex=lnd.macaroon_hex, timeout=5)
    payment = lnd_client.pay(challenge.invoice, None, 0)
    status = lnd_client.lookup(payment.payment_hash)
    credentials = parse_authorization(challenge.authorization(payment.preimage))
    terms = check_challenge(challenge, network="bcrt", max_price_msat=2000, size=1)
    other = issuer.invoice(1000)
    node.lie_about_preimage = True
    with pytest.raises(errors.PreimageMismatch) as mismatch:
        ClnClient(cln.path, timeout=5, retry_for=1).pay(other.invoice, None, 0)
    objects = [
        challenge,
        credentials,
        payment,
        status,
        PaymentStatus(PaymentState.COMPLETE, payment.payment_hash, payment),
        terms,
        terms.invoice,
        decode_invoice(other.invoice),
        decode_macaroon(macaroon),
        lnd_client,
        ClnClient(cln.path),
        issued_challenge,
        issued_challenge.invoice,
        mismatch.value,
        errors.PaymentFailed("no_route", payment_hash=payment.payment_hash),
        errors.PaymentPending("in flight"),
        errors.PaymentUnauthorized("HTTP 401"),
        errors.InvalidCredentials("a preimage is 64 hex digits"),
        *[node_payment for node_payment in node.attempts],
    ]
    secrets = [
        preimage,
        other.preimage,
        macaroon,
        lnd.macaroon,
        decode_macaroon(macaroon).signature,
    ]
    assert_hidden(objects, secrets)


def test_refusals_do_not_quote_the_macaroon(issuer: InvoiceIssuer) -> None:
    challenge = parse_challenge(issuer.challenge(2000).header)
    mac = challenge.macaroon
    bad = [
        f'L402 macaroon="{mac}", invoice="{challenge.invoice}", macaroon="{mac}"',
        f'L402 macaroon="{mac}\x01", invoice="x"',
        f'L402 macaroon="{mac}*", invoice="x"',
        f'L402 macaroon="{mac}" invoice="x"',
        f'L402 macaroon="{mac * 30}", invoice="x"',
        f'{challenge.scheme} macaroon="{mac}", invoice="x", L402 macaroon="{mac}A", invoice="x"',
    ]
    refusals = []
    for value in bad:
        with pytest.raises(errors.ChallengeRefused) as caught:
            parse_challenge(value)
        refusals.append(caught.value)
    assert_hidden(refusals, [challenge.macaroon_bytes])
    swapped = replace(challenge, invoice=issuer.invoice(2000).invoice)
    with pytest.raises(errors.InvoiceRefused) as mismatch:
        check_challenge(swapped, network="bcrt", max_price_msat=2000, size=1)
    assert_hidden([mismatch.value], [challenge.macaroon_bytes])


def test_debug_logs_carry_no_secrets(
    issuer: InvoiceIssuer,
    lnd: FakeLndServer,
    cln: FakeClnServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    via_lnd, via_cln = issuer.invoice(1000), issuer.invoice(1000)
    lnd_client = LndRestClient(lnd.url, macaroon_hex=lnd.macaroon_hex, timeout=5)
    lnd_client.pay(via_lnd.invoice, None, 0)
    lnd_client.lookup(via_lnd.payment_hash)
    cln_client = ClnClient(cln.path, timeout=5, retry_for=1)
    cln_client.pay(via_cln.invoice, None, 0)
    cln_client.lookup(via_cln.payment_hash)
    assert caplog.records  # urllib3 did log at DEBUG: the check below means something
    assert_hidden(
        [r.getMessage() for r in caplog.records], [via_lnd.preimage, via_cln.preimage, lnd.macaroon]
    )

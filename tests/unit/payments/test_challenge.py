"""Parsing ``WWW-Authenticate`` L402 challenges and writing ``Authorization`` values.

Grammar: RFC 9110 section 11.6.1 (challenges, auth-params, quoted strings); L402
shapes: the L402 protocol specification (lightninglabs/L402) and Aperture, which sends
an ``LSAT`` twin next to the ``L402`` challenge.
"""

from __future__ import annotations

import base64
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_outbox.exceptions import OutboxError
from django_outbox.payments import challenge
from django_outbox.payments.challenge import (
    MAX_INVOICE_CHARS,
    MAX_MACAROON_CHARS,
    L402Challenge,
    authorization,
    parse_authorization,
    parse_challenge,
)
from django_outbox.payments.errors import ChallengeRefused, InvalidCredentials, Reason

MAC = base64.b64encode(os.urandom(120)).decode()
INV = "lnbcrt100n1p43qlxqpp5k8k8z43" + "q" * 200


def header(scheme: str = "L402", macaroon: str = MAC, invoice: str = INV) -> str:
    return f'{scheme} macaroon="{macaroon}", invoice="{invoice}"'


def refused(value: str | list[str]) -> Reason:
    with pytest.raises(ChallengeRefused) as caught:
        parse_challenge(value)
    return caught.value.reason


def test_reads_an_l402_challenge() -> None:
    challenge = parse_challenge(header())
    assert (challenge.scheme, challenge.macaroon, challenge.invoice) == ("L402", MAC, INV)
    assert challenge.macaroon_bytes == base64.b64decode(MAC)


def test_reads_the_legacy_lsat_name_and_answers_in_it() -> None:
    challenge = parse_challenge(header("LSAT"))
    assert challenge.scheme == "LSAT"
    assert challenge.authorization("ab" * 32).startswith(f"LSAT {MAC}:")


def test_prefers_l402_when_aperture_sends_an_lsat_twin() -> None:
    # requests joins repeated headers with ", ": the grammar splits them again.
    assert parse_challenge(f"{header('LSAT')}, {header('L402')}").scheme == "L402"
    assert parse_challenge([header("LSAT"), header("L402")]).scheme == "L402"


def test_scheme_and_parameter_names_are_case_insensitive() -> None:
    value = f'l402 MACAROON="{MAC}",Invoice = "{INV}"'
    assert parse_challenge(value).invoice == INV


def test_ignores_other_schemes_around_it() -> None:
    value = f'Bearer realm="x", error="invalid_token", Basic dGVzdA==, {header()}, Negotiate'
    assert parse_challenge(value).macaroon == MAC


def test_unescapes_quoted_pairs_and_accepts_unquoted_tokens() -> None:
    escaped = MAC[:10] + "\\" + MAC[10:]
    assert parse_challenge(f'L402 macaroon="{escaped}", invoice={INV}').macaroon == MAC


def test_accepts_url_safe_unpadded_base64() -> None:
    raw = os.urandom(100)
    text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert parse_challenge(header(macaroon=text)).macaroon_bytes == raw


@pytest.mark.parametrize(
    "value",
    [
        "L402 macaroon=",
        'L402 macaroon="unterminated',
        f'L402 macaroon="{MAC}" invoice="{INV}"',
        f'L402 macaroon="{MAC}", macaroon="{MAC}", invoice="{INV}"',
        f'L402 invoice="{INV}"',
        f'L402 macaroon="{MAC}"',
        "L402 dG9rZW42OA==",
        f'L402 macaroon="{MAC}\x01", invoice="{INV}"',
        f'=L402 macaroon="{MAC}", invoice="{INV}"',
        f'L402 macaroon="{MAC}", invoice="lnbc-1"',
        f'L402 macaroon="{MAC}", invoice="{INV}" trailing',
        f'L402 macaroon="{MAC}", invoice="{INV}\u20ac"',
    ],
)
def test_refuses_malformed_headers(value: str) -> None:
    assert refused(value) is Reason.MALFORMED


def test_refuses_an_answer_without_an_l402_challenge() -> None:
    assert refused('Bearer realm="inbox"') is Reason.NO_CHALLENGE
    assert refused("") is Reason.NO_CHALLENGE


def test_refuses_two_l402_challenges_in_one_header_or_two() -> None:
    other = base64.b64encode(os.urandom(64)).decode()
    assert refused(f"{header()}, {header(macaroon=other)}") is Reason.MULTIPLE_CHALLENGES
    assert refused([header(), header(macaroon=other)]) is Reason.MULTIPLE_CHALLENGES
    assert refused([header("LSAT"), header("lsat")]) is Reason.MULTIPLE_CHALLENGES


def test_refuses_an_lsat_twin_that_differs() -> None:
    other = base64.b64encode(os.urandom(64)).decode()
    assert refused([header("LSAT", macaroon=other), header()]) is Reason.MULTIPLE_CHALLENGES


def test_refuses_a_macaroon_over_the_cap() -> None:
    assert parse_challenge(header(macaroon="A" * MAX_MACAROON_CHARS))
    assert refused(header(macaroon="A" * (MAX_MACAROON_CHARS + 4))) is Reason.MACAROON_TOO_LARGE


def test_refuses_a_one_megabyte_macaroon_cheaply(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused on its length alone: the scanner never reads a byte of it."""
    scanned: list[str] = []
    monkeypatch.setattr(challenge, "_scan", lambda value: scanned.append(value) or [])
    assert refused(header(macaroon="A" * (1 << 20))) is Reason.HEADER_TOO_LARGE
    assert scanned == []


def test_refuses_an_invoice_over_the_cap() -> None:
    assert refused(header(invoice="lnbc1" + "q" * 10_000)) is Reason.INVOICE_TOO_LARGE
    assert parse_challenge(header(invoice="q" * MAX_INVOICE_CHARS))


def test_refuses_a_macaroon_that_is_not_base64() -> None:
    assert refused(header(macaroon="not*base64")) is Reason.MACAROON_NOT_BASE64
    assert refused(header(macaroon="AAAAA")) is Reason.MACAROON_NOT_BASE64
    assert refused(header(macaroon="AA=A")) is Reason.MACAROON_NOT_BASE64


@pytest.mark.parametrize(
    "hostile",
    [
        "a=" * 32_000,
        "L402 " + "a=b, " * 12_000,
        'L402 macaroon="' + "\\a" * 30_000,
        "L402 " + "x" * 60_000 + "=",
        ", " * 32_000,
        "L402 m=" + "a" * 60_000 + '",',
    ],
)
def test_parsing_time_is_linear_in_hostile_input(hostile: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ChallengeRefused):
        parse_challenge(hostile)
    assert time.perf_counter() - started < 0.5


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=300), st.lists(st.text(max_size=100), max_size=3)))
def test_any_text_is_a_challenge_or_a_typed_refusal(value: str | list[str]) -> None:
    outcome: object
    try:
        outcome = parse_challenge(value)
    except ChallengeRefused as exc:
        outcome = exc
    if isinstance(outcome, ChallengeRefused):
        assert isinstance(outcome, OutboxError)
        assert outcome.reason in Reason
    else:
        assert isinstance(outcome, L402Challenge)


@settings(max_examples=200, deadline=None)
@given(
    st.binary(min_size=1, max_size=300),
    st.text("qpzry9x8gf2tvdw0s3jn54khce6mua7l", min_size=1, max_size=300),
    st.sampled_from(["L402", "l402", "LSAT"]),
    st.sampled_from([", ", ",", " ,\t", ",,  "]),
)
def test_well_formed_challenges_read_back(
    raw: bytes, invoice: str, scheme: str, comma: str
) -> None:
    macaroon = base64.b64encode(raw).decode()
    value = f'Basic abc=, {scheme} macaroon="{macaroon}"{comma}invoice="lnbc{invoice}"{comma}'
    challenge = parse_challenge(value)
    assert challenge.macaroon_bytes == raw
    assert challenge.invoice == f"lnbc{invoice}"


def test_authorization_round_trips() -> None:
    preimage = os.urandom(32)
    value = authorization(MAC, preimage)
    assert value == f"L402 {MAC}:{preimage.hex()}"
    credentials = parse_authorization(value)
    assert (credentials.scheme, credentials.macaroon, credentials.preimage) == (
        "L402",
        MAC,
        preimage,
    )
    assert parse_authorization(authorization(MAC, preimage.hex(), scheme="lsat")).scheme == "LSAT"


@pytest.mark.parametrize(
    ("macaroon", "preimage", "scheme"),
    [
        (MAC, b"short", "L402"),
        (MAC, "zz" * 32, "L402"),
        ("not base64!", os.urandom(32), "L402"),
        ("A" * (MAX_MACAROON_CHARS + 4), os.urandom(32), "L402"),
        (MAC, os.urandom(32), "Bearer"),
    ],
)
def test_authorization_refuses_bad_parts(macaroon: str, preimage: bytes | str, scheme: str) -> None:
    with pytest.raises(InvalidCredentials):
        authorization(macaroon, preimage, scheme=scheme)


@pytest.mark.parametrize(
    "value",
    ["", "L402", f"L402 {MAC}", f"Bearer {MAC}:{'ab' * 32}", f"L402 {MAC}:{'ab' * 31}", "L402 *:x"],
)
def test_parse_authorization_refuses_what_is_not_a_credential(value: str) -> None:
    with pytest.raises(InvalidCredentials):
        parse_authorization(value)

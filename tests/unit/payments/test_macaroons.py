"""Reading macaroon v2 binaries and L402 identifiers (lightninglabs/aperture
``l402/identifier.go``: version uint16 big-endian, payment hash, token id), checked
against ``pymacaroons``, an independent implementation of the format."""

from __future__ import annotations

import base64
import os

import pytest

from django_outbox.payments.errors import ChallengeRefused, Reason
from django_outbox.payments.macaroons import decode_macaroon, l402_identifier
from testproject.lightning import macaroons

ROOT = os.urandom(32)
IDENTIFIER = b"\x00\x00" + bytes(range(32)) + bytes(range(32, 64))


def test_reads_what_the_minter_writes() -> None:
    raw = macaroons.mint(ROOT, IDENTIFIER, location=b"inbox", caveats=[b"a=1", b"b=2"])
    decoded = decode_macaroon(raw)
    assert decoded.identifier == IDENTIFIER
    assert decoded.location == b"inbox"
    assert [c.identifier for c in decoded.caveats] == [b"a=1", b"b=2"]
    assert macaroons.verify(ROOT, decoded)
    assert not macaroons.verify(os.urandom(32), decoded)


def test_agrees_with_pymacaroons_both_ways() -> None:
    pymacaroons = pytest.importorskip("pymacaroons")
    from pymacaroons.serializers import BinarySerializer

    theirs = pymacaroons.Macaroon(
        location="inbox", identifier=IDENTIFIER, key=ROOT, version=pymacaroons.MACAROON_V2
    )
    theirs.add_first_party_caveat("services=inbox:0")
    text = theirs.serialize(serializer=BinarySerializer())
    decoded = decode_macaroon(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    assert decoded.identifier == IDENTIFIER
    assert decoded.signature.hex() == theirs.signature
    assert macaroons.verify(ROOT, decoded)

    ours = macaroons.mint(ROOT, IDENTIFIER, location=b"inbox", caveats=[b"services=inbox:0"])
    back = pymacaroons.Macaroon.deserialize(
        base64.urlsafe_b64encode(ours).decode(), serializer=BinarySerializer()
    )
    verifier = pymacaroons.Verifier()
    verifier.satisfy_exact("services=inbox:0")
    assert verifier.verify(back, ROOT)


def test_identifier_names_the_payment_hash_and_token() -> None:
    identifier = l402_identifier(IDENTIFIER)
    assert identifier.version == 0
    assert identifier.payment_hash == bytes(range(32))
    assert identifier.payment_hash_hex == bytes(range(32)).hex()
    assert identifier.token_id == bytes(range(32, 64))


@pytest.mark.parametrize(
    "identifier", [b"", IDENTIFIER[:-1], IDENTIFIER + b"x", b"\x00\x01" + IDENTIFIER[2:]]
)
def test_refuses_identifiers_that_are_not_l402_version_0(identifier: bytes) -> None:
    with pytest.raises(ChallengeRefused) as caught:
        l402_identifier(identifier)
    assert caught.value.reason is Reason.MACAROON_INVALID


GOOD = macaroons.mint(ROOT, IDENTIFIER, caveats=[b"x=y"])


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01" + GOOD[1:],
        GOOD[:-1],
        GOOD + b"\x00",
        GOOD[:10],
        b"\x02\x02\xff\xff\xff\xff\xff\x01",
        b"\x02\x06\x20" + bytes(32),
        b"\x02\x02\x01a\x00\x04\x01v\x00",
        GOOD.replace(b"\x06\x20", b"\x06\x1f", 1)[:-1],
    ],
)
def test_refuses_broken_binaries(data: bytes) -> None:
    with pytest.raises(ChallengeRefused) as caught:
        decode_macaroon(data)
    assert caught.value.reason is Reason.MACAROON_INVALID

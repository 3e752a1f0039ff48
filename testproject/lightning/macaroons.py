"""Mint and verify L402 macaroons (macaroon v2 binary, libmacaroons' HMAC chain).

The package only *reads* macaroons (:mod:`django_outbox.payments.macaroons`); minting
and verifying belong to the server, so they live here, with the fakes.  Signature:
``key = HMAC(b"macaroons-key-generator", root_key)``, ``sig = HMAC(key, identifier)``,
then ``sig = HMAC(sig, caveat)`` per first-party caveat; the tests check the result
against ``pymacaroons``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from django_outbox.payments.macaroons import Macaroon

_EOS, _LOCATION, _IDENTIFIER, _SIGNATURE = 0, 1, 2, 6


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(kind: int, data: bytes) -> bytes:
    return bytes([kind]) + _uvarint(len(data)) + data


def signature(root_key: bytes, identifier: bytes, caveats: Sequence[bytes] = ()) -> bytes:
    """The signature of a macaroon with these first-party caveats."""
    sig = _hmac(_hmac(b"macaroons-key-generator", root_key), identifier)
    for caveat in caveats:
        sig = _hmac(sig, caveat)
    return sig


def mint(
    root_key: bytes, identifier: bytes, *, location: bytes = b"", caveats: Sequence[bytes] = ()
) -> bytes:
    """A signed v2 binary macaroon."""
    out = bytearray([2])
    if location:
        out += _field(_LOCATION, location)
    out += _field(_IDENTIFIER, identifier) + bytes([_EOS])
    for caveat in caveats:
        out += _field(_IDENTIFIER, caveat) + bytes([_EOS])
    out += bytes([_EOS]) + _field(_SIGNATURE, signature(root_key, identifier, caveats))
    return bytes(out)


def verify(root_key: bytes, macaroon: Macaroon) -> bool:
    """Whether ``root_key`` signed ``macaroon`` (first-party caveats only)."""
    if any(c.verification_id is not None for c in macaroon.caveats):
        return False
    expected = signature(root_key, macaroon.identifier, [c.identifier for c in macaroon.caveats])
    return hmac.compare_digest(expected, macaroon.signature)

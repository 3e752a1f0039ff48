"""Just enough of the macaroon v2 binary format to read an L402 token's identifier.

An L402 macaroon names the invoice it was minted for: its identifier is a version
(uint16, big-endian, 0 today), the invoice's 32-byte payment hash and a 32-byte token
id (lightninglabs/aperture ``l402/identifier.go``).  The sender only needs to *read*
it, to check that the invoice it is about to pay is the one the macaroon names; it
never verifies the signature (only the minting server holds the root key).  The
maintained-looking options on PyPI (``pymacaroons``, last released 2018, and
``macaroonbakery`` on top of it) bring PyNaCl and six for a format that takes forty
lines to read, so the reader is here; the tests check it against ``pymacaroons``.

Format (libmacaroons ``v2``, go-macaroon ``MarshalBinary``): a version byte ``0x02``,
then fields ``type, uvarint length, bytes``: [location] identifier EOS, then per
caveat [location] identifier [verification id] EOS, then EOS, then the signature.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django_outbox.payments.errors import ChallengeRefused, Reason

_EOS, _LOCATION, _IDENTIFIER, _VID, _SIGNATURE = 0, 1, 2, 4, 6
_VERSION_2 = 2
_L402_IDENTIFIER_BYTES = 2 + 32 + 32


@dataclass(frozen=True)
class Caveat:
    """One caveat: ``identifier`` (a first-party condition such as ``b"services=inbox:0"``),
    ``location`` and ``verification_id`` for third-party caveats only."""

    identifier: bytes
    location: bytes | None = None
    verification_id: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Macaroon:
    """A decoded macaroon.  The signature is a bearer secret and stays out of ``repr``."""

    identifier: bytes
    location: bytes | None
    caveats: tuple[Caveat, ...]
    signature: bytes = field(repr=False)


@dataclass(frozen=True)
class L402Identifier:
    """The identifier of an L402 macaroon: the invoice's payment hash and the token id."""

    version: int
    payment_hash: bytes
    token_id: bytes

    @property
    def payment_hash_hex(self) -> str:
        """The payment hash as lower-case hex, as invoices and nodes spell it."""
        return self.payment_hash.hex()


def _invalid(detail: str) -> ChallengeRefused:
    return ChallengeRefused(Reason.MACAROON_INVALID, detail)


def _field(data: bytes, pos: int) -> tuple[int, bytes, int]:
    """Read one field at ``pos``: (type, payload, next position)."""
    if pos >= len(data):
        raise _invalid("truncated")
    kind = data[pos]
    pos += 1
    if kind == _EOS:
        return kind, b"", pos
    length = shift = 0
    while True:  # unsigned LEB128, at most 4 bytes: nothing here is 256 MiB long
        if pos >= len(data) or shift > 21:
            raise _invalid("bad field length")
        byte = data[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if pos + length > len(data):
        raise _invalid("field runs past the end")
    return kind, data[pos : pos + length], pos + length


def decode_macaroon(data: bytes) -> Macaroon:
    """Decode a v2 binary macaroon; :class:`ChallengeRefused` (``macaroon_invalid``) if it
    is not one.  Time and memory are linear in ``len(data)``."""
    if not data or data[0] != _VERSION_2:
        raise _invalid("not a version 2 binary macaroon")
    kind, value, pos = _field(data, 1)
    location = None
    if kind == _LOCATION:
        location = value
        kind, value, pos = _field(data, pos)
    if kind != _IDENTIFIER:
        raise _invalid("no identifier")
    identifier = value
    kind, _, pos = _field(data, pos)
    if kind != _EOS:
        raise _invalid("unexpected field after the identifier")
    caveats = []
    while True:
        kind, value, pos = _field(data, pos)
        if kind == _EOS:
            break
        caveat_location = None
        if kind == _LOCATION:
            caveat_location = value
            kind, value, pos = _field(data, pos)
        if kind != _IDENTIFIER:
            raise _invalid("caveat without identifier")
        caveat_id, vid = value, None
        kind, value, pos = _field(data, pos)
        if kind == _VID:
            vid = value
            kind, value, pos = _field(data, pos)
        if kind != _EOS:
            raise _invalid("unexpected field in a caveat")
        caveats.append(Caveat(caveat_id, caveat_location, vid))
    kind, signature, pos = _field(data, pos)
    if kind != _SIGNATURE or len(signature) != 32:
        raise _invalid("no 32-byte signature")
    if pos != len(data):
        raise _invalid("trailing bytes")
    return Macaroon(identifier, location, tuple(caveats), signature)


def l402_identifier(identifier: bytes) -> L402Identifier:
    """Split an L402 identifier (version 0: payment hash, token id)."""
    if len(identifier) != _L402_IDENTIFIER_BYTES:
        raise _invalid(f"identifier is {len(identifier)} bytes, an L402 one is 66")
    version = int.from_bytes(identifier[:2], "big")
    if version != 0:
        raise _invalid(f"unknown L402 identifier version {version}")
    return L402Identifier(version, identifier[2:34], identifier[34:66])

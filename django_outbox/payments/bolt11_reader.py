"""A BOLT11 invoice reader: bech32 text, human-readable part, tagged fields, signature.

The invoice a ``402`` carries is decoded once per payment, on the worker's payment
threads.  The ``bolt11`` package builds a ``bitstring`` object per 5-bit group, 3.5-5 ms
of CPU per invoice; here the groups are read as integers (about 0.2 ms) and the
signature is checked by ``coincurve`` (libsecp256k1, the ``payments`` extra).  What it
reads, and what it refuses, is compared with ``bolt11``'s decoder, on fixed invoices and
on random alterations of them (``tests/unit/payments/test_bolt11_reader.py``): a payer's
reading of an amount must be the one the Lightning ecosystem shares.  It is stricter in
one way, as BIP 173 says: text mixing upper and lower case is refused.

:func:`read_invoice` raises :class:`ValueError` for anything it cannot read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from operator import xor
from typing import Any

import coincurve
from coincurve.ecdsa import cdata_to_der, deserialize_recoverable, recoverable_convert

CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_NOT_BECH32 = 0xFF
#: Each byte of lower-case text as its 5-bit value (:data:`_NOT_BECH32` where it is none).
_WORD_OF_BYTE = bytes(CHARSET.find(chr(byte)) % 256 for byte in range(256))
_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)
#: For each value of a checksum's top five bits, the generators they add (BIP 173).
_STEP = tuple(
    reduce(xor, (generator for i, generator in enumerate(_GENERATOR) if top >> i & 1), 0)
    for top in range(32)
)
_HRP = re.compile(r"ln(bcrt|bc|tbs|tb)(?:(\d+)([munp]?))?")
#: Millisatoshis per unit of amount for each multiplier (1 BTC = 10^11 msat).
_MSAT = {"": 10**11, "m": 10**8, "u": 10**5, "n": 10**2}
_SIGNATURE_WORDS = 104  # 65 bytes: 64 of signature and the recovery id
_TIMESTAMP_WORDS = 7  # 35 bits
_HASH_WORDS = 52  # 256 bits, padded to 260
_KEY_WORDS = 53  # 33 bytes, padded to 265 bits
DEFAULT_EXPIRY = 3600


@dataclass(frozen=True)
class Invoice:
    """The fields of a verified invoice that a payer needs (amounts in msat, hex)."""

    currency: str
    amount_msat: int | None
    timestamp: int
    payment_hash: str
    payment_secret: str
    expiry: int
    payee: str


def polymod(values: Sequence[int]) -> int:
    """The bech32 checksum function (BIP 173) of ``values``: 1 for a valid string's
    expanded human-readable part, words and checksum."""
    checksum = 1
    for value in values:
        checksum = (checksum & 0x1FFFFFF) << 5 ^ value ^ _STEP[checksum >> 25]
    return checksum


def expand(hrp: str) -> list[int]:
    """The human-readable part as the bech32 checksum reads it (BIP 173)."""
    return [ord(char) >> 5 for char in hrp] + [0] + [ord(char) & 31 for char in hrp]


def _bech32(text: str) -> tuple[str, list[int]]:
    """The human-readable part and the 5-bit words of bech32 ``text``, checksum checked
    (BOLT11 lifts bech32's 90-character limit)."""
    if text.lower() != text and text.upper() != text:
        raise ValueError("mixed case")
    text = text.lower()
    split = text.rfind("1")
    if split < 1 or split + 7 > len(text):
        raise ValueError("no separator or checksum")
    hrp = text[:split]
    if not text.isascii() or not all(33 <= ord(char) <= 126 for char in hrp):
        raise ValueError("not bech32")
    data = text[split + 1 :].encode("ascii").translate(_WORD_OF_BYTE)
    if _NOT_BECH32 in data:
        raise ValueError("not bech32")
    words = list(data)
    if polymod(expand(hrp) + words) != 1:
        raise ValueError("bad checksum")
    return hrp, words[:-6]


def _amount(hrp: str) -> tuple[str, int | None]:
    """The currency and the amount (msat, None if absent) of the human-readable part."""
    found = _HRP.fullmatch(hrp)
    if found is None:
        raise ValueError("not a BOLT11 prefix")
    currency, digits, multiplier = found.groups()
    if digits is None:
        return currency, None
    if multiplier == "p":  # a pico-bitcoin is a tenth of a millisatoshi
        if int(digits) % 10:
            raise ValueError("sub-millisatoshi amount")
        return currency, int(digits) // 10
    return currency, int(digits) * _MSAT[multiplier]


def _number(words: Sequence[int]) -> int:
    value = 0
    for word in words:
        value = value << 5 | word
    return value


def to_bytes(words: Sequence[int], *, pad: bool) -> bytes:
    """``words`` as bytes: zero bits added to the last byte (``pad``: the signed data)
    or the extra bits dropped (a field's value)."""
    value, bits = _number(words), 5 * len(words)
    if pad:
        value, bits = value << (-bits % 8), bits + (-bits % 8)
    else:
        value, bits = value >> (bits % 8), bits - bits % 8
    return value.to_bytes(bits // 8, "big")


def _fields(data: Sequence[int]) -> dict[str, Any]:
    """The known tagged fields of ``data`` (after the timestamp), the first of each kind
    with the length BOLT11 requires; others skipped as BOLT11 says."""
    found: dict[str, Any] = {}
    at = 0
    while at < len(data):
        if at + 3 > len(data):
            raise ValueError("truncated field")
        tag, length = CHARSET[data[at]], data[at + 1] * 32 + data[at + 2]
        value, at = data[at + 3 : at + 3 + length], at + 3 + length
        if at > len(data):
            raise ValueError("truncated field")
        if tag in found:
            continue
        if (tag in "psh" and length == _HASH_WORDS) or (tag == "n" and length == _KEY_WORDS):
            if not (tag == "h" and "d" in found):
                found[tag] = to_bytes(value, pad=False).hex()
        elif tag == "d" and "h" not in found:
            found[tag] = to_bytes(value, pad=False).decode()
        elif tag == "x":
            found[tag] = _number(value)
    return found


def _payee(hrp: str, signed: bytes, signature: bytes, key: str | None) -> str:
    """The payee's key (hex, compressed): ``key`` once the signature is verified against
    it, else the key recovered from the signature."""
    message = hrp.encode("ascii") + signed
    if key is None:
        recovered = coincurve.PublicKey.from_signature_and_message(signature, message)
        return recovered.format(compressed=True).hex()
    der = cdata_to_der(recoverable_convert(deserialize_recoverable(signature)))
    if not coincurve.verify_signature(der, message, bytes.fromhex(key)):
        raise ValueError("bad signature")
    return key


def read_invoice(text: str) -> Invoice:
    """Decode and verify a BOLT11 invoice; :class:`ValueError` if it is not a valid one
    with a payment hash, a payment secret and a description (or its hash)."""
    hrp, words = _bech32(text)
    currency, amount = _amount(hrp)
    if len(words) < _TIMESTAMP_WORDS + _SIGNATURE_WORDS:
        raise ValueError("too short")
    data, signature = words[:-_SIGNATURE_WORDS], words[-_SIGNATURE_WORDS:]
    fields = _fields(data[_TIMESTAMP_WORDS:])
    if "p" not in fields or "s" not in fields:
        raise ValueError("no payment hash or payment secret")
    if "d" not in fields and "h" not in fields:  # an empty description is one
        raise ValueError("no description")
    payee = _payee(hrp, to_bytes(data, pad=True), to_bytes(signature, pad=True), fields.get("n"))
    return Invoice(
        currency=currency,
        amount_msat=amount,
        timestamp=_number(data[:_TIMESTAMP_WORDS]),
        payment_hash=fields["p"],
        payment_secret=fields["s"],
        expiry=fields.get("x", DEFAULT_EXPIRY),
        payee=payee,
    )

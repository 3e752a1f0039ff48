"""Read an L402 challenge from ``WWW-Authenticate``; write the ``Authorization`` answer.

A destination that charges answers ``402`` with::

    WWW-Authenticate: L402 macaroon="<base64>", invoice="<bolt11>"

and accepts the request again with ``Authorization: L402 <macaroon>:<preimage hex>``
once the invoice is paid.  ``LSAT`` is the scheme's former name: Aperture still sends
an ``LSAT`` challenge next to the ``L402`` one, with the same macaroon and invoice.

The parser follows RFC 9110 section 11 (challenges are comma-separated, parameters are
``name=token`` or ``name="quoted string"``) and is strict: what it does not understand
it refuses with :class:`~django_outbox.payments.errors.ChallengeRefused`, never guesses.
It scans left to right with anchored, non-nested character classes (no backtracking),
so its time is linear in the header's length, and it refuses before scanning a header
longer than :data:`MAX_HEADER_CHARS`.

Size caps, checked before anything is decoded:

* :data:`MAX_HEADER_CHARS` (64 KiB): ``http.client`` refuses longer header lines
  anyway, so no real answer through ``requests`` is longer.
* :data:`MAX_MACAROON_CHARS` (4 KiB of base64, 3 KiB of macaroon): an L402 macaroon is
  a 66-byte identifier, a location, a few caveats and a 32-byte signature, a few hundred
  bytes; 4 KiB leaves room for many caveats and refuses absurd ones.
* :data:`MAX_INVOICE_CHARS` (4 KiB): a BOLT11 invoice is ~250 characters bare; a
  description is at most 639 bytes (~1,030 characters) and each route hint hop is
  ~85, so real invoices stay under ~2 KB.  4 KiB covers a full description and a dozen
  route hints; anything longer is not an invoice a node would make.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from django_outbox.payments.errors import ChallengeRefused, InvalidCredentials, Reason

MAX_HEADER_CHARS = 64 * 1024
MAX_MACAROON_CHARS = 4096
MAX_INVOICE_CHARS = 4096

#: The scheme names we answer, current first.
SCHEMES = ("L402", "LSAT")

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_SPACES = re.compile(r"[ \t]*")
_SEPARATORS = re.compile(r"[ \t,]*")
_QDTEXT = re.compile(r"[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]*")
_QUOTABLE = re.compile(r"[\t \x21-\x7e\x80-\xff]")
_BASE64 = re.compile(r"[A-Za-z0-9+/_\-]+={0,2}")
_PREIMAGE_HEX = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class L402Challenge:
    """One L402 challenge: ``macaroon`` (base64 text, exactly as received, a bearer
    secret once paired with the preimage) and ``invoice`` (BOLT11)."""

    scheme: str
    macaroon: str = field(repr=False)
    invoice: str = field(repr=False)

    def __repr__(self) -> str:
        return (
            f"L402Challenge(scheme={self.scheme!r}, invoice={self.invoice[:24]!r}..., "
            f"macaroon=<{len(self.macaroon)} chars>)"
        )

    @property
    def macaroon_bytes(self) -> bytes:
        """The macaroon, base64-decoded (standard or URL-safe alphabet, padded or not)."""
        return _b64decode(self.macaroon)

    def authorization(self, preimage: bytes | str) -> str:
        """The ``Authorization`` value answering this challenge, in its own scheme."""
        return authorization(self.macaroon, preimage, scheme=self.scheme)


@dataclass(frozen=True)
class L402Credentials:
    """A parsed ``Authorization: L402 <macaroon>:<preimage>`` value (the server's side)."""

    scheme: str
    macaroon: str = field(repr=False)
    preimage: bytes = field(repr=False)

    @property
    def macaroon_bytes(self) -> bytes:
        """The macaroon, base64-decoded."""
        return _b64decode(self.macaroon)


@dataclass
class _Raw:
    scheme: str
    params: dict[str, str]
    token68: str | None


def _malformed(detail: str) -> ChallengeRefused:
    return ChallengeRefused(Reason.MALFORMED, detail)


def _b64decode(text: str) -> bytes:
    """Decode base64 in either alphabet, with or without padding; ValueError if not."""
    if not _BASE64.fullmatch(text):
        raise ValueError("not base64")
    normal = text.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(normal + "=" * (-len(normal) % 4), validate=True)
    except binascii.Error as exc:
        raise ValueError("not base64") from exc


def _quoted(s: str, pos: int) -> tuple[str, int]:
    """Read the quoted string opening at ``s[pos]``: (unescaped value, next position)."""
    parts, pos = [], pos + 1
    while True:
        run = _QDTEXT.match(s, pos)
        assert run is not None  # a `*` pattern always matches
        parts.append(run.group())
        pos = run.end()
        if pos >= len(s):
            raise _malformed("unterminated quoted string")
        if s[pos] == '"':
            return "".join(parts), pos + 1
        if s[pos] == "\\" and _QUOTABLE.match(s, pos + 1):
            parts.append(s[pos + 1])
            pos += 2
            continue
        raise _malformed(f"control character in a quoted string at offset {pos}")


def _skip(pattern: re.Pattern[str], s: str, pos: int) -> int:
    found = pattern.match(s, pos)
    assert found is not None  # a `*` pattern always matches
    return found.end()


def _param(s: str, pos: int, params: dict[str, str]) -> int:
    """Read ``name = value`` at ``pos`` into ``params``; returns the next position."""
    name = _TOKEN.match(s, pos)
    if name is None:
        raise _malformed(f"expected a parameter name at offset {pos}")
    pos = _skip(_SPACES, s, name.end())
    if pos >= len(s) or s[pos] != "=":
        raise _malformed(f"expected '=' at offset {pos}")
    pos = _skip(_SPACES, s, pos + 1)
    if pos < len(s) and s[pos] == '"':
        value, pos = _quoted(s, pos)
    else:
        token = _TOKEN.match(s, pos)
        if token is None:
            raise _malformed(f"expected a parameter value at offset {pos}")
        value, pos = token.group(), token.end()
    key = name.group().lower()
    if key in params:
        raise _malformed(f"parameter {key!r} given twice")
    params[key] = value
    return pos


def _params(s: str, pos: int, params: dict[str, str]) -> int:
    """Read a challenge's comma-separated parameters; stops before the next challenge."""
    while True:
        pos = _skip(_SPACES, s, _param(s, pos, params))
        if pos >= len(s) or s[pos] != ",":
            return pos
        nxt = _skip(_SEPARATORS, s, pos)
        name = _TOKEN.match(s, nxt)
        if name is None:
            return pos  # end of input, or garbage the caller reports
        after = _skip(_SPACES, s, name.end())
        if after >= len(s) or s[after] != "=":
            return pos  # a token not followed by '=' starts the next challenge
        pos = nxt


def _scan(s: str) -> list[_Raw]:
    """Every challenge in one header value, in order."""
    challenges: list[_Raw] = []
    pos = 0
    while True:
        pos = _skip(_SEPARATORS, s, pos)
        if pos >= len(s):
            return challenges
        scheme = _TOKEN.match(s, pos)
        if scheme is None:
            raise _malformed(f"expected an auth scheme at offset {pos}")
        raw = _Raw(scheme.group(), {}, None)
        pos = scheme.end()
        gap = _skip(_SPACES, s, pos)
        if gap > pos and gap < len(s) and s[gap] != ",":
            token68 = _TOKEN68.match(s, gap)
            end = _skip(_SPACES, s, token68.end()) if token68 else gap
            if token68 and (end >= len(s) or s[end] == ","):
                raw.token68, pos = token68.group(), end
            else:
                pos = _params(s, gap, raw.params)
        pos = _skip(_SPACES, s, pos)
        if pos < len(s) and s[pos] != ",":
            raise _malformed(f"unexpected character at offset {pos}")
        challenges.append(raw)


def _pick(raws: list[_Raw]) -> _Raw:
    """The one L402 challenge; an LSAT twin with the same values is allowed."""
    found = {name: [r for r in raws if r.scheme.upper() == name] for name in SCHEMES}
    if not any(found.values()):
        raise ChallengeRefused(Reason.NO_CHALLENGE, "no L402 or LSAT challenge")
    if any(len(same) > 1 for same in found.values()):
        raise ChallengeRefused(Reason.MULTIPLE_CHALLENGES, "more than one challenge")
    chosen = [r for name in SCHEMES for r in found[name]]
    if len(chosen) == 2 and (chosen[0].params, chosen[0].token68) != (
        chosen[1].params,
        chosen[1].token68,
    ):
        raise ChallengeRefused(Reason.MULTIPLE_CHALLENGES, "L402 and LSAT challenges differ")
    return chosen[0]


def parse_challenge(header: str | Iterable[str]) -> L402Challenge:
    """The L402 challenge in a ``WWW-Authenticate`` value, or in several values of it.

    Raises :class:`~django_outbox.payments.errors.ChallengeRefused` and nothing else:
    ``reason`` is one of ``malformed``, ``header_too_large``, ``no_challenge``,
    ``multiple_challenges``, ``macaroon_too_large``, ``invoice_too_large``,
    ``macaroon_not_base64``.  ``requests`` joins repeated headers with ``", "``, which
    this grammar reads back as separate challenges.
    """
    values = [header] if isinstance(header, str) else list(header)
    if sum(len(value) for value in values) > MAX_HEADER_CHARS:
        raise ChallengeRefused(Reason.HEADER_TOO_LARGE, f"over {MAX_HEADER_CHARS} characters")
    raw = _pick([challenge for value in values for challenge in _scan(value)])
    if raw.token68 is not None:
        raise _malformed("an L402 challenge takes parameters, not a token")
    macaroon, invoice = raw.params.get("macaroon"), raw.params.get("invoice")
    if macaroon is None or invoice is None:
        raise _malformed("the challenge lacks a macaroon or an invoice")
    if len(macaroon) > MAX_MACAROON_CHARS:
        raise ChallengeRefused(
            Reason.MACAROON_TOO_LARGE, f"{len(macaroon)} characters > {MAX_MACAROON_CHARS}"
        )
    if len(invoice) > MAX_INVOICE_CHARS:
        raise ChallengeRefused(
            Reason.INVOICE_TOO_LARGE, f"{len(invoice)} characters > {MAX_INVOICE_CHARS}"
        )
    try:
        _b64decode(macaroon)
    except ValueError:
        raise ChallengeRefused(Reason.MACAROON_NOT_BASE64, "the macaroon is not base64") from None
    if not (invoice.isascii() and invoice.isalnum()):
        raise _malformed("the invoice is not bech32 text")
    return L402Challenge(raw.scheme.upper(), macaroon, invoice)


def _preimage_bytes(preimage: bytes | str) -> bytes:
    if isinstance(preimage, str):
        if not _PREIMAGE_HEX.fullmatch(preimage):
            raise InvalidCredentials("a preimage is 64 hex digits")
        return bytes.fromhex(preimage)
    if len(preimage) != 32:
        raise InvalidCredentials("a preimage is 32 bytes")
    return bytes(preimage)


def authorization(macaroon: str, preimage: bytes | str, *, scheme: str = "L402") -> str:
    """``<scheme> <macaroon>:<preimage hex>``, the ``Authorization`` value of a paid token.

    ``macaroon`` is the base64 text of the challenge, sent back unchanged.
    """
    if scheme.upper() not in SCHEMES:
        raise InvalidCredentials(f"unknown scheme {scheme!r}")
    if len(macaroon) > MAX_MACAROON_CHARS or not _BASE64.fullmatch(macaroon):
        raise InvalidCredentials("the macaroon is not base64 of an acceptable size")
    return f"{scheme.upper()} {macaroon}:{_preimage_bytes(preimage).hex()}"


def parse_authorization(value: str) -> L402Credentials:
    """Read ``L402 <macaroon>:<preimage hex>`` (or ``LSAT ...``); :class:`InvalidCredentials`
    if it is anything else.  For servers and tests; the sender only writes these."""
    scheme, _, token = value.strip().partition(" ")
    macaroon, colon, preimage = token.strip().rpartition(":")
    if scheme.upper() not in SCHEMES or not colon:
        raise InvalidCredentials("not an L402 credential")
    if len(macaroon) > MAX_MACAROON_CHARS or not _BASE64.fullmatch(macaroon):
        raise InvalidCredentials("the macaroon is not base64 of an acceptable size")
    return L402Credentials(scheme.upper(), macaroon, _preimage_bytes(preimage))

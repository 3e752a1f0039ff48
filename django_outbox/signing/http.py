"""HTTP Signatures for ActivityPub deliveries: draft-cavage and RFC 9421, at send time.

Every attempt is signed afresh (receivers reject old ``Date`` and ``created``
values), so this runs thousands of times a second and is kept cheap: the key is
parsed once per process (:func:`django_outbox.sending.keys.load_private_key`), the body
digest is computed once per message by the caller, and the rest is string
building around one private-key operation.

:func:`sign_headers` checks the request and writes the headers both schemes share;
each scheme's signature is made by its own module, :mod:`~django_outbox.signing.cavage`
and :mod:`~django_outbox.signing.rfc9421`.
"""

from __future__ import annotations

import base64
import functools
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.utils import format_datetime
from enum import StrEnum
from types import MappingProxyType

from django_outbox.exceptions import InvalidInbox, SigningError
from django_outbox.sending.keys import SenderKey, load_private_key, valid_key_id
from django_outbox.signing.cavage import cavage_signature
from django_outbox.signing.rfc9421 import rfc9421_fields
from django_outbox.transport.target import Target, parse_target

_EMPTY: Mapping[str, str] = MappingProxyType({})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers this module writes; an extra header must not silently replace one of them.
_GENERATED = frozenset(
    {"host", "date", "content-type", "digest", "content-digest", "signature", "signature-input"}
)


class Scheme(StrEnum):
    """The HTTP signature schemes a delivery can be signed with (double-knocking)."""

    CAVAGE = "draft-cavage"
    RFC9421 = "rfc9421"


def fallback_scheme(scheme: Scheme) -> Scheme:
    """The scheme of the second knock, after ``scheme`` was refused (400/401)."""
    return Scheme.RFC9421 if scheme is Scheme.CAVAGE else Scheme.CAVAGE


def sign_headers(
    scheme: Scheme,
    key: SenderKey,
    *,
    method: str,
    url: str,
    body: bytes,
    content_type: str,
    body_sha256: bytes,
    extra_headers: Mapping[str, str] = _EMPTY,
    covered_extra: Sequence[str] = (),
    now: datetime | None = None,
) -> dict[str, str]:
    """Return every header to send with a signed request, signed now.

    The result holds ``Host``, ``Date`` and ``Content-Type``; ``Digest`` and
    ``Signature`` for draft-cavage, or ``Content-Digest``, ``Signature-Input``
    and ``Signature`` for RFC 9421; and ``extra_headers`` (values trimmed of
    surrounding blanks, as receivers see them).  ``covered_extra`` names
    lower-case headers from ``extra_headers`` that the signature must also cover
    (e.g. ``collection-synchronization``, which FEP-8fcf requires be signed).

    ``body_sha256`` must be the SHA-256 digest of ``body``, computed once per
    message by the caller; ``body`` is not hashed again here.  ``url`` is an
    absolute http(s) URL; what is signed is the host, path and query as the
    transport sends them (both read it with ``parse_target``).  ``now`` (timezone-aware)
    defaults to the current time and exists for tests.

    Raises :class:`SigningError` for unusable input and
    :class:`~django_outbox.sending.keys.InvalidSigningKey` if the key cannot be loaded.
    """
    del body  # Part of the contract so callers pass the exact bytes; only its digest is signed.
    try:
        scheme = Scheme(scheme)
    except ValueError as exc:
        raise SigningError(f"unknown signature scheme {scheme!r}") from exc
    private_key = load_private_key(key.private_key_pem)
    _check_key_id(key.key_id)
    if len(body_sha256) != 32:
        raise SigningError("body_sha256 must be the 32-byte SHA-256 digest of the body")
    verb = method.upper()
    if not verb.isascii() or not verb.isalpha():
        raise SigningError(f"invalid HTTP method {method!r}")
    wire = _read_url(url)
    host, target = wire.host_header, wire.path
    created = int(time.time()) if now is None else _timestamp(now)
    headers = {
        "Host": host,
        "Date": _imf_fixdate(created),
        "Content-Type": _field_value("Content-Type", content_type),
    }
    extra = _extra_fields(extra_headers, covered_extra)
    digest_b64 = base64.b64encode(body_sha256).decode("ascii")
    if scheme is Scheme.CAVAGE:
        headers["Digest"] = "SHA-256=" + digest_b64
        headers.update(extra.values())
        lines = [
            f"(request-target): {verb.lower()} {target}",
            "host: " + host,
            "date: " + headers["Date"],
            "digest: " + headers["Digest"],
            "content-type: " + headers["Content-Type"],
        ]
        lines.extend(f"{name}: {extra[name][1]}" for name in covered_extra)
        headers["Signature"] = cavage_signature(private_key, key.key_id, lines, covered_extra)
        return headers
    headers["Content-Digest"] = f"sha-256=:{digest_b64}:"
    headers.update(extra.values())
    fields = {"Content-Digest": headers["Content-Digest"]}
    fields.update(extra[name] for name in covered_extra)
    headers.update(
        rfc9421_fields(private_key, key.key_id, verb, wire.url, created, fields, covered_extra)
    )
    return headers


def _check_key_id(key_id: str) -> None:
    if not valid_key_id(key_id):
        raise SigningError(f"key id {key_id!r} must be printable ASCII without quotes")


def _read_url(url: str) -> Target:
    """``url`` as the transport puts it on the wire: host, ``Host`` header, request target.

    Read by :func:`~django_outbox.transport.target.parse_target` (cached), the one
    parser of inbox URLs, so what is signed is what is sent.
    """
    try:
        return parse_target(url)
    except InvalidInbox as exc:
        raise SigningError(f"cannot sign for this URL: {exc}") from None


@functools.lru_cache(maxsize=8)
def _imf_fixdate(timestamp: int) -> str:
    """Format a Unix time as an RFC 7231 IMF-fixdate, once per second rather than per call."""
    return format_datetime(datetime.fromtimestamp(timestamp, UTC), usegmt=True)


def _timestamp(now: datetime) -> int:
    if now.tzinfo is None or now.utcoffset() is None:
        raise SigningError("now must be a timezone-aware datetime")
    return int(now.timestamp())


def _field_value(name: str, value: str) -> str:
    """Return a header value trimmed as receivers see it, refusing what cannot be signed."""
    value = value.strip(" \t")
    if not value.isascii() or not value.replace("\t", " ").isprintable():
        raise SigningError(f"header {name!r} must be printable ASCII on one line")
    return value


def _extra_fields(
    extra_headers: Mapping[str, str], covered_extra: Sequence[str]
) -> dict[str, tuple[str, str]]:
    """Map lower-case names of the extra headers to (name as given, trimmed value)."""
    fields: dict[str, tuple[str, str]] = {}
    for name, value in extra_headers.items():
        lower = name.lower()
        if not _TOKEN.fullmatch(name):
            raise SigningError(f"invalid header name {name!r}")
        if lower in _GENERATED or lower in fields:
            raise SigningError(f"header {name!r} is set by signing or given twice")
        fields[lower] = (name, _field_value(name, value))
    if isinstance(covered_extra, str):
        raise SigningError("covered_extra must be a sequence of header names, not a string")
    for name in covered_extra:
        if name != name.lower() or name not in fields:
            raise SigningError(f"covered header {name!r} must be a lower-case extra header name")
    if len(set(covered_extra)) != len(covered_extra):
        raise SigningError("covered_extra names a header twice")
    return fields

"""HTTP Signatures for ActivityPub deliveries: draft-cavage and RFC 9421, at send time.

Every attempt is signed afresh (receivers reject old ``Date`` and ``created``
values), so this runs thousands of times a second and is kept cheap: the key is
parsed once per process (:func:`django_outbox.sending.keys.load_private_key`), the body
digest is computed once per message by the caller, and the rest is string
building around one private-key operation.

draft-cavage signatures are built here.  RFC 9421 signatures are produced by
``http_message_signatures.HTTPMessageSigner``, with one signer and key resolver
per key (cached), a minimal request object, and the caller's ``Content-Digest``
reused rather than the body hashed again.  Its structured-field handling (it
builds the signature base twice, in ``prepare()`` and ``apply()``) costs about
0.8 ms per signature more than building the base by hand did, ten times an
Ed25519 signature itself; that is the price of not keeping our own RFC 9421
serializer.
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

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from http_message_signatures import HTTPMessageSigner, MappingKeyResolver
from http_message_signatures.algorithms import ED25519, RSA_V1_5_SHA256

from django_outbox.exceptions import InvalidInbox, OutboxError
from django_outbox.sending.keys import (
    PARSED_KEY_CACHE_SIZE,
    PrivateKey,
    SenderKey,
    load_private_key,
    valid_key_id,
)
from django_outbox.transport.target import Target, parse_target

__all__ = [
    "CAVAGE_COVERED",
    "RFC9421_COVERED",
    "RFC9421_LABEL",
    "Scheme",
    "SigningError",
    "fallback_scheme",
    "sign_headers",
]

RFC9421_LABEL = "sig1"
"""The label of our signature in ``Signature-Input`` and ``Signature``."""

RFC9421_COVERED = ("@method", "@target-uri", "@authority", "content-digest")
"""Components every RFC 9421 signature covers, before any ``covered_extra`` fields."""

CAVAGE_COVERED = ("(request-target)", "host", "date", "digest", "content-type")
"""Headers every draft-cavage signature covers, in order, as Mastodon signs them."""

_EMPTY: Mapping[str, str] = MappingProxyType({})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers this module writes; an extra header must not silently replace one of them.
_GENERATED = frozenset(
    {"host", "date", "content-type", "digest", "content-digest", "signature", "signature-input"}
)
_PKCS1V15 = padding.PKCS1v15()
_SHA256 = hashes.SHA256()


class SigningError(OutboxError):
    """A request could not be signed: bad URL, method, header, key id or digest."""


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
        signature = _sign(private_key, "\n".join(lines))
        # hs2019 tells the verifier to take the algorithm from the key itself;
        # draft-cavage has no name of its own for Ed25519.
        algorithm = "rsa-sha256" if isinstance(private_key, RSAPrivateKey) else "hs2019"
        covered = " ".join((*CAVAGE_COVERED, *covered_extra))
        headers["Signature"] = (
            f'keyId="{key.key_id}",algorithm="{algorithm}",headers="{covered}",'
            f'signature="{signature}"'
        )
        return headers
    headers["Content-Digest"] = f"sha-256=:{digest_b64}:"
    headers.update(extra.values())
    # The signer reads only covered fields, so it is shown only those (less for it
    # to normalise); it adds Signature-Input and Signature to them.
    fields = {"Content-Digest": headers["Content-Digest"]}
    fields.update(extra[name] for name in covered_extra)
    request = _Request(verb, wire.url, fields)
    try:
        # With an existing Content-Digest and no body, the library only checks the
        # digest's format; it does not hash the body again.
        _rfc9421_signer(key.key_id, private_key).sign(
            request,
            key_id=key.key_id,
            label=RFC9421_LABEL,
            created=datetime.fromtimestamp(created, UTC),
            covered_component_ids=(*RFC9421_COVERED, *covered_extra),
            use_existing_digest=True,
        )
    except Exception as exc:  # Library and OpenSSL failures alike.
        raise SigningError(f"signing failed: {exc}") from exc
    headers["Signature-Input"] = fields["Signature-Input"]
    headers["Signature"] = fields["Signature"]
    return headers


class _Request:
    """The request as ``HTTPMessageSigner`` reads it: an upper-case method, the
    encoded absolute URL, and a header dict that it adds the signature fields to.
    """

    __slots__ = ("headers", "method", "url")

    def __init__(self, method: str, url: str, headers: dict[str, str]) -> None:
        self.method = method
        self.url = url
        self.headers = headers


# Keyed on the parsed key object, which load_private_key returns unchanged while cached.
@functools.lru_cache(maxsize=PARSED_KEY_CACHE_SIZE)
def _rfc9421_signer(key_id: str, private_key: PrivateKey) -> HTTPMessageSigner:
    """Return the signer, with its key resolver, for one key; made once per key."""
    algorithm = RSA_V1_5_SHA256 if isinstance(private_key, RSAPrivateKey) else ED25519
    resolver = MappingKeyResolver(public_keys={}, private_keys={key_id: private_key})
    return HTTPMessageSigner(signature_algorithm=algorithm, key_resolver=resolver)


def _sign(private_key: PrivateKey, base: str) -> str:
    """Sign the ASCII draft-cavage signing string and return the signature in base64."""
    data = base.encode("ascii")
    try:
        if isinstance(private_key, RSAPrivateKey):
            raw = private_key.sign(data, _PKCS1V15, _SHA256)
        else:
            raw = private_key.sign(data)
    except Exception as exc:  # OpenSSL failures surface as assorted exception types.
        raise SigningError(f"signing failed: {exc}") from exc
    return base64.b64encode(raw).decode("ascii")


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

"""Standard Webhooks signatures (standardwebhooks.com, specification 1.0.0).

A webhook is signed over ``{webhook-id}.{webhook-timestamp}.{body}`` with every
secret the endpoint has: HMAC-SHA256 for a ``whsec_`` secret (``v1``), Ed25519
for a ``whsk_`` signing key (``v1a``).  The signatures go space-separated in one
``webhook-signature`` header, so that during a rotation a receiver holding
either the old or the new secret accepts the request.

Every attempt is signed afresh: receivers refuse a ``webhook-timestamp`` more
than five minutes away from their clock.  ``webhook-id`` is what receivers
de-duplicate on, so it must stay the same across the attempts of one message.

Secrets never appear in ``repr``, ``str``, error messages or the local
variables of a frame an error is raised from: parsing happens in functions that
return rather than raise, and the raising frames drop the secret first.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Sequence
from typing import Literal, Protocol, TypeAlias

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from django_outbox.exceptions import InvalidSend
from django_outbox.values.safe_text import shown

__all__ = [
    "MAX_SYMMETRIC_BYTES",
    "MIN_SYMMETRIC_BYTES",
    "WEBHOOK_SCHEME",
    "InvalidWebhookMessage",
    "InvalidWebhookSecret",
    "WebhookKeys",
    "WebhookScheme",
    "WebhookSecret",
    "WebhookSecretResolver",
    "as_webhook_keys",
    "check_webhook_id",
    "new_signing_key",
    "new_symmetric_secret",
    "new_webhook_id",
    "sign_webhook",
]

WebhookScheme = Literal["v1", "v1a"]
"""Signature identifiers: ``v1`` is HMAC-SHA256, ``v1a`` is Ed25519."""

MIN_SYMMETRIC_BYTES = 24
"""The specification's smallest symmetric secret: 192 bits."""

MAX_SYMMETRIC_BYTES = 64
"""The specification's largest symmetric secret: 512 bits."""

MAX_ID_LENGTH = 255
"""The longest ``webhook-id`` accepted; Svix-style ids are about 30 characters."""

MAX_TIMESTAMP = 253_402_300_799
"""9999-12-31T23:59:59Z, the last second every verifier's date type can hold."""

_SYMMETRIC = "whsec_"
_SIGNING_KEY = "whsk_"
_PUBLIC_KEY = "whpk_"
# The specification asks that the id hold no "." (the signed content is dot-separated);
# headers also rule out blanks and controls.  This covers UUIDs, ULIDs, KSUIDs and
# Svix/Stripe-style "msg_..." ids.
_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_ID_LENGTH}}}", re.ASCII)
_HEADER_VALUE = re.compile(r"[\x20-\x7e]+", re.ASCII)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*", re.ASCII)
_PARSED_SECRETS_CACHE_SIZE = 1024

WEBHOOK_SCHEME = "standard-webhooks"
"""What the metrics call the signature of a webhook request (next to the HTTP schemes)."""


class InvalidWebhookSecret(InvalidSend):
    """A webhook secret is not a ``whsec_`` secret or a ``whsk_`` Ed25519 signing key.

    The message says what is wrong without quoting the secret.
    """


class InvalidWebhookMessage(InvalidSend):
    """A webhook id, timestamp, body or content type that cannot be signed or sent."""


class WebhookSecret:
    """One parsed webhook secret, ready to sign with.

    Built from the text shown to the endpoint's owner: ``whsec_<base64>`` (24 to
    64 random bytes, HMAC-SHA256, scheme ``v1``) or ``whsk_<base64>`` (an
    Ed25519 private key, scheme ``v1a``; the 32-byte seed, as the reference
    libraries write it, or the 64-byte seed-and-public-key form).  Unpadded
    base64 is accepted, as the reference verifier accepts it; blanks, the
    URL-safe alphabet and anything else are not.  Raises
    :class:`InvalidWebhookSecret`.

    The key material is held privately and shown nowhere; ``public_key`` is the
    ``whpk_`` text to give receivers of ``v1a`` signatures.  Parsing is cached
    per process (an Ed25519 key costs as much to load as to sign with).
    Pickling is refused so that a secret cannot travel in a Celery message.
    """

    __slots__ = ("_hmac", "_private_key", "public_key", "scheme")

    scheme: WebhookScheme
    public_key: str | None
    _hmac: hmac.HMAC | None
    _private_key: Ed25519PrivateKey | None

    def __init__(self, text: str) -> None:
        parsed = _parse(text) if isinstance(text, str) else "a webhook secret must be a string"
        del text
        if isinstance(parsed, str):
            raise InvalidWebhookSecret(parsed)
        self.scheme, self._hmac, self._private_key, self.public_key = parsed

    def __repr__(self) -> str:
        scheme = getattr(self, "scheme", None)  # also while __init__ raises
        public = getattr(self, "public_key", None)
        public_part = f", public_key={public!r}" if public else ""
        return f"WebhookSecret(scheme={scheme!r}{public_part})"

    def __reduce__(self) -> str:
        raise TypeError("a WebhookSecret is not pickled; resolve it where it is used")

    def sign(self, content: bytes) -> str:
        """Return ``<scheme>,<base64 signature>`` of the signed content."""
        if self._hmac is not None:
            mac = self._hmac.copy()
            mac.update(content)
            raw = mac.digest()
        else:
            assert self._private_key is not None
            raw = self._private_key.sign(content)
        return f"{self.scheme},{base64.b64encode(raw).decode('ascii')}"


class WebhookKeys:
    """What a webhook secret resolver returns: every secret a message is signed with.

    Usually one; two or more while a secret is being rotated, when every one of
    them signs and a receiver holding any of them accepts.  Give the secrets as
    text (parsed here, raising :class:`InvalidWebhookSecret` naming which one is
    wrong by position) or as :class:`WebhookSecret` objects.
    """

    __slots__ = ("secrets",)

    secrets: tuple[WebhookSecret, ...]

    def __init__(self, *secrets: str | WebhookSecret) -> None:
        parsed = _parse_all(secrets)
        del secrets
        if isinstance(parsed, str):
            raise InvalidWebhookSecret(parsed)
        self.secrets = parsed

    def __repr__(self) -> str:
        return f"WebhookKeys{getattr(self, 'secrets', ())!r}"

    def __reduce__(self) -> str:
        raise TypeError("WebhookKeys are not pickled; resolve them where they are used")


ResolvedSecrets: TypeAlias = WebhookKeys | str | WebhookSecret | Sequence[str | WebhookSecret]
"""What a resolver may return besides ``None``: keys, one secret, or several in order."""


class WebhookSecretResolver(Protocol):
    """The application's ``OUTBOX_WEBHOOK_SECRET_RESOLVER``.

    Called with the sender and one endpoint URL, as given to
    ``outbox.send_webhook``; returns the secrets to sign that endpoint's
    deliveries with (see :func:`as_webhook_keys` for the forms accepted), or
    ``None`` when the sender has no such endpoint.
    """

    def __call__(self, sender: str, endpoint: str, /) -> ResolvedSecrets | None:
        """The secrets of ``endpoint`` of ``sender``, or ``None``."""
        ...


def as_webhook_keys(resolved: object) -> WebhookKeys | None:
    """What a secret resolver returned, as :class:`WebhookKeys` (``None`` stays ``None``).

    Accepts :class:`WebhookKeys`, one secret (its text or a :class:`WebhookSecret`),
    or a list or tuple of them, which all sign (a rotation).  Raises
    :class:`InvalidWebhookSecret` for anything else or a secret that does not parse,
    with no secret in the locals of this frame.
    """
    if resolved is None or isinstance(resolved, WebhookKeys):
        return resolved
    if isinstance(resolved, str | WebhookSecret):
        items: tuple[object, ...] = (resolved,)
    elif isinstance(resolved, list | tuple):
        items = tuple(resolved)
    else:
        kind = type(resolved).__name__
        del resolved
        raise InvalidWebhookSecret(
            "a webhook secret resolver must return WebhookKeys, a secret, a list of secrets "
            f"or None, not {kind}"
        )
    del resolved
    parsed = _parse_all(items)  # type: ignore[arg-type]  # _parse_all refuses non-strings
    del items
    if isinstance(parsed, str):
        raise InvalidWebhookSecret(parsed)
    keys = object.__new__(WebhookKeys)
    keys.secrets = parsed
    return keys


def sign_webhook(
    keys: WebhookKeys,
    msg_id: str,
    body: bytes,
    timestamp: int | None = None,
    *,
    content_type: str = "application/json",
) -> dict[str, str]:
    """Return the headers of one signed webhook attempt.

    ``webhook-id`` is ``msg_id`` (1 to 255 characters from ``A-Z a-z 0-9 _ -``;
    the same for every attempt of a message, see :func:`new_webhook_id`),
    ``webhook-timestamp`` is ``timestamp`` (Unix seconds, now by default),
    ``webhook-signature`` holds one signature per secret of ``keys``, in their
    order, and ``Content-Type`` is ``content_type``.  ``body`` must be the exact
    bytes sent.  Raises :class:`InvalidWebhookMessage` for an id, timestamp, body
    or content type that cannot be signed.
    """
    check_webhook_id(msg_id)
    if timestamp is None:
        timestamp = int(time.time())
    elif type(timestamp) is not int or not 0 <= timestamp <= MAX_TIMESTAMP:
        raise InvalidWebhookMessage(
            f"a webhook timestamp must be Unix seconds, not {shown(timestamp)}"
        )
    if not isinstance(body, bytes):
        raise InvalidWebhookMessage(f"a webhook body must be bytes, not {type(body).__name__}")
    if not isinstance(content_type, str) or not _HEADER_VALUE.fullmatch(content_type):
        raise InvalidWebhookMessage(f"content type {shown(content_type)} is not a header value")
    content = b"%s.%d.%s" % (msg_id.encode("ascii"), timestamp, body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(secret.sign(content) for secret in keys.secrets),
        "Content-Type": content_type,
    }


def check_webhook_id(msg_id: str) -> None:
    """Raise :class:`InvalidWebhookMessage` unless ``msg_id`` can be a ``webhook-id``.

    1 to 255 characters of ``A-Z a-z 0-9 _ -``: no "." (the specification's
    rule, as the signed content is dot-separated), nothing a header cannot hold.
    ``outbox`` checks an application's own id with this before storing it.
    """
    if not isinstance(msg_id, str) or not _ID.fullmatch(msg_id):
        raise InvalidWebhookMessage(
            f"a webhook id must be 1 to {MAX_ID_LENGTH} characters of A-Z a-z 0-9 _ -, "
            f"not {shown(msg_id)}"
        )


def new_webhook_id() -> str:
    """A fresh ``msg_`` id: 144 random bits, URL-safe base64, 28 characters in all.

    Random rather than derived from database keys, so that two deployments (or
    one database restored from a backup) never reuse an id a receiver has
    already de-duplicated.
    """
    return "msg_" + secrets.token_urlsafe(18)


def new_symmetric_secret(nbytes: int = 32) -> str:
    """A fresh ``whsec_`` secret of ``nbytes`` random bytes, to show an endpoint's owner."""
    if not MIN_SYMMETRIC_BYTES <= nbytes <= MAX_SYMMETRIC_BYTES:
        raise ValueError(f"nbytes must be {MIN_SYMMETRIC_BYTES} to {MAX_SYMMETRIC_BYTES}")
    return _SYMMETRIC + base64.b64encode(secrets.token_bytes(nbytes)).decode("ascii")


def new_signing_key() -> str:
    """A fresh ``whsk_`` Ed25519 signing key (its 32-byte seed in base64).

    ``WebhookSecret(key).public_key`` is the ``whpk_`` text for receivers.
    """
    seed = Ed25519PrivateKey.generate().private_bytes_raw()
    return _SIGNING_KEY + base64.b64encode(seed).decode("ascii")


_Parsed = tuple[WebhookScheme, hmac.HMAC | None, Ed25519PrivateKey | None, str | None]


def _parse_all(items: tuple[str | WebhookSecret, ...]) -> tuple[WebhookSecret, ...] | str:
    """The secrets, parsed; or the message of the first error (this never raises)."""
    if not items:
        return "WebhookKeys needs at least one secret"
    parsed: list[WebhookSecret] = []
    for position, item in enumerate(items, 1):
        if isinstance(item, WebhookSecret):
            parsed.append(item)
            continue
        result = _parse(item) if isinstance(item, str) else "a webhook secret must be a string"
        if isinstance(result, str):
            return f"webhook secret {position} of {len(items)}: {result}"
        secret = object.__new__(WebhookSecret)
        secret.scheme, secret._hmac, secret._private_key, secret.public_key = result
        parsed.append(secret)
    return tuple(parsed)


@functools.lru_cache(maxsize=_PARSED_SECRETS_CACHE_SIZE)
def _parse(text: str) -> _Parsed | str:
    """Parse a secret's text; or return what is wrong with it (this never raises).

    Returning the error rather than raising keeps the secret out of the locals
    of any frame in the error's traceback.
    """
    if text.startswith(_SYMMETRIC):
        raw = _decode(text[len(_SYMMETRIC) :])
        if raw is None:
            return "a whsec_ secret must be base64 after its prefix"
        if not MIN_SYMMETRIC_BYTES <= len(raw) <= MAX_SYMMETRIC_BYTES:
            return (
                f"a whsec_ secret must hold {MIN_SYMMETRIC_BYTES} to {MAX_SYMMETRIC_BYTES} "
                f"bytes, this one holds {len(raw)}"
            )
        return ("v1", hmac.new(raw, digestmod=hashlib.sha256), None, None)
    if text.startswith(_SIGNING_KEY):
        raw = _decode(text[len(_SIGNING_KEY) :])
        if raw is None:
            return "a whsk_ signing key must be base64 after its prefix"
        if len(raw) not in (32, 64):
            return f"a whsk_ signing key must hold 32 or 64 bytes, this one holds {len(raw)}"
        key = Ed25519PrivateKey.from_private_bytes(raw[:32])
        public = key.public_key().public_bytes_raw()
        if len(raw) == 64 and not hmac.compare_digest(raw[32:], public):
            return "the public half of this 64-byte whsk_ signing key does not match its seed"
        return ("v1a", None, key, _PUBLIC_KEY + base64.b64encode(public).decode("ascii"))
    if text.startswith(_PUBLIC_KEY):
        return "a whpk_ public key verifies signatures; signing needs the whsk_ key"
    return "a webhook secret must start with whsec_ or whsk_"


def _decode(text: str) -> bytes | None:
    """Strict standard base64, padded or not; ``None`` if it is not that."""
    data = text.rstrip("=")
    padding = len(text) - len(data)
    if not _BASE64.fullmatch(data) or len(data) % 4 == 1 or padding not in (0, -len(data) % 4):
        return None
    try:  # cannot fail after the checks above; if it did, this must still not raise
        return base64.b64decode(data + "=" * (-len(data) % 4), validate=True)
    except binascii.Error:
        return None

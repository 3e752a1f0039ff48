"""Sender keys: what the application's resolver returns, and a per-process parse cache.

Signing happens on every delivery attempt, thousands of times a second, while
parsing a PEM-encoded RSA key with OpenSSL's full consistency checks costs tens
of milliseconds (holding the GIL).  Parsed keys are therefore cached per process.

RSA validation policy: the first time a process sees a given PEM it is loaded
with cryptography's full RSA key validation.  The SHA-256 of every PEM that has
passed is remembered (a bounded set, far larger than the parsed-key cache), so
when the same PEM is parsed again after being evicted from the parsed-key cache,
``unsafe_skip_rsa_key_validation=True`` is used: validation is a deterministic
function of those bytes and they already passed in this process.  An unseen key
is never loaded unchecked, because signing with an inconsistent RSA key can
misbehave inside OpenSSL or publish signatures that leak the private key; keys
may come from imports and old databases, not only from our own generator.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from django_outbox.exceptions import OutboxError

__all__ = [
    "PARSED_KEY_CACHE_SIZE",
    "VALIDATED_KEY_MEMORY",
    "InvalidSigningKey",
    "KeyResolver",
    "PrivateKey",
    "SenderKey",
    "generate_ed25519_pem",
    "generate_rsa_pem",
    "load_private_key",
    "public_pem",
    "valid_key_id",
]

PrivateKey = RSAPrivateKey | Ed25519PrivateKey
"""The private key types django_outbox can sign with."""

PARSED_KEY_CACHE_SIZE = 1024
"""How many parsed keys each process keeps; an RSA-2048 key object costs a few KB."""

VALIDATED_KEY_MEMORY = 65_536
"""How many PEM fingerprints (SHA-256) of already validated keys each process remembers."""


class InvalidSigningKey(OutboxError, ValueError):
    """A sender's private key is not a usable unencrypted PEM RSA or Ed25519 key."""


@dataclass(frozen=True)
class SenderKey:
    """What the application's key resolver returns for an actor.

    ``key_id`` is the URL of the actor's public key (for example
    ``https://example.com/users/alice#main-key``); remote servers fetch it to
    verify.  ``private_key_pem`` is an unencrypted PKCS#8 or traditional PEM
    RSA or Ed25519 private key; it is left out of ``repr`` so it cannot end up
    in logs or tracebacks.
    """

    key_id: str
    private_key_pem: str = field(repr=False)


class KeyResolver(Protocol):
    """The application's ``OUTBOX_KEY_RESOLVER``: the signing key of an actor, or None.

    It may also have a ``gone(actor_id) -> bool`` attribute, asked after the
    statuses in ``OUTBOX_SENDER_GONE_STATUSES``: a sender that is gone for good
    has its deliveries refused rather than retried.
    """

    def __call__(self, actor_id: str, /) -> SenderKey | None:
        """The key ``actor_id`` signs with, or ``None`` if it has none."""
        ...


_validated: OrderedDict[bytes, None] = OrderedDict()
_validated_lock = threading.Lock()
_parsing = threading.Lock()


def _remember_validated(fingerprint: bytes) -> None:
    with _validated_lock:
        _validated[fingerprint] = None
        _validated.move_to_end(fingerprint)
        if len(_validated) > VALIDATED_KEY_MEMORY:
            _validated.popitem(last=False)


def _was_validated(fingerprint: bytes) -> bool:
    with _validated_lock:
        return fingerprint in _validated


@functools.lru_cache(maxsize=PARSED_KEY_CACHE_SIZE)
def _load_cached(pem: str) -> PrivateKey:
    try:
        data = pem.encode("ascii")
    except (UnicodeEncodeError, AttributeError) as exc:
        raise InvalidSigningKey("a private key PEM must be an ASCII string") from exc
    fingerprint = hashlib.sha256(data).digest()
    # Threads that miss the cache at once (a worker's first signatures) parse one at a
    # time, so an RSA key is validated once (tens of milliseconds), not once a thread.
    with _parsing:
        try:
            key = serialization.load_pem_private_key(
                data, password=None, unsafe_skip_rsa_key_validation=_was_validated(fingerprint)
            )
        except TypeError as exc:
            # cryptography raises TypeError for an encrypted PEM loaded without a password.
            raise InvalidSigningKey(f"cannot use this private key: {exc}") from exc
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise InvalidSigningKey(f"not a readable PEM private key: {exc}") from exc
        if not isinstance(key, RSAPrivateKey | Ed25519PrivateKey):
            raise InvalidSigningKey(
                f"unsupported private key type {type(key).__name__}; use RSA or Ed25519"
            )
        _remember_validated(fingerprint)
    return key


def _load_or_reason(pem: str) -> PrivateKey | str:
    """The parsed key, or why it cannot be used; the failure's frames are dropped here."""
    if not isinstance(pem, str):
        return f"a private key PEM must be a string, not {type(pem).__name__}"
    try:
        return _load_cached(pem)
    except InvalidSigningKey as error:
        return str(error)


def load_private_key(pem: str) -> PrivateKey:
    """Parse an unencrypted PEM private key (PKCS#8 or traditional), cached per process.

    Returns the same key object for the same PEM while it stays in the bounded
    LRU cache (:data:`PARSED_KEY_CACHE_SIZE` entries), so signing does not pay
    for parsing on every attempt.  Raises :class:`InvalidSigningKey` for
    anything that is not an RSA or Ed25519 private key (EC, DSA, encrypted PEMs,
    public keys, garbage); failures are not cached.

    The error is raised with no cause and from a frame that no longer holds the
    PEM: error trackers that record the local variables of every frame (Sentry
    does by default) must not receive the key.
    """
    loaded = _load_or_reason(pem)
    del pem
    if isinstance(loaded, str):
        raise InvalidSigningKey(loaded)
    return loaded


def valid_key_id(key_id: object) -> bool:
    """Whether ``key_id`` can be written into a signature as it is.

    The key id goes inside a quoted string (draft-cavage) and a structured-field
    String (RFC 9421): printable ASCII without quotes or backslashes needs no escaping.
    """
    return (
        isinstance(key_id, str)
        and bool(key_id)
        and key_id.isascii()
        and key_id.isprintable()
        and '"' not in key_id
        and "\\" not in key_id
    )


def generate_rsa_pem(bits: int = 2048) -> str:
    """Generate a fresh RSA private key as PKCS#8 PEM, for tests, demos and benchmarks."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return _private_pem(key)


def generate_ed25519_pem() -> str:
    """Generate a fresh Ed25519 private key as PKCS#8 PEM, for tests, demos and benchmarks."""
    return _private_pem(ed25519.Ed25519PrivateKey.generate())


def public_pem(private_pem: str) -> str:
    """Return the SubjectPublicKeyInfo PEM of a private key, as an actor document publishes it.

    Raises :class:`InvalidSigningKey` as :func:`load_private_key` does, from a frame
    that no longer holds the private key.
    """
    loaded = _load_or_reason(private_pem)
    del private_pem
    if isinstance(loaded, str):
        raise InvalidSigningKey(loaded)
    public = loaded.public_key()
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def _private_pem(key: PrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")

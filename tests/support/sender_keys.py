"""Keys a resolver may hand back that no worker can sign with, and resolvers returning them."""

from __future__ import annotations

from collections.abc import Callable

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from django_outbox.sending.keys import SenderKey, generate_ed25519_pem

KEY_ID = "https://demo.example/users/alice#main-key"


def ec_pem() -> str:
    """A PEM EC private key: readable, but neither RSA nor Ed25519."""
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")


def encrypted_pem() -> str:
    """A PEM Ed25519 private key encrypted with a password."""
    return (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
        .decode("ascii")
    )


def garbage_pem() -> str:
    """A PEM-looking block whose body is no key (but is secret-looking text all the same)."""
    body = "TUlJQ0lqQU5CZ2txaGtpRzl3MEJBUUVGQUFPQ0FnOEFNSUlDQ2dLQ0FnRUF" * 4
    return f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"


def resolver_returning(value: object) -> Callable[[str], object]:
    """An ``OUTBOX_KEY_RESOLVER`` that returns ``value`` for every actor."""
    return lambda actor: value


def good_key() -> SenderKey:
    """A fresh Ed25519 key any worker can sign with."""
    return SenderKey(KEY_ID, generate_ed25519_pem())

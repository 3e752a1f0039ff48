"""Loading senders' private keys: both PEM formats, cached, unusable keys refused."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa

from django_outbox.exceptions import OutboxError
from django_outbox.sending import keys
from django_outbox.sending.keys import InvalidSigningKey, SenderKey, load_private_key, public_pem
from django_outbox.signing import Scheme
from tests.support.signing_samples import KEY_ID, sign


def _pem(key: Any, fmt: Any = serialization.PrivateFormat.PKCS8, crypt: Any = None) -> str:
    crypt = crypt or serialization.NoEncryption()
    return str(key.private_bytes(serialization.Encoding.PEM, fmt, crypt).decode())


def test_load_private_key_caches_and_reads_both_pem_formats(rsa_pem: str, ed_pem: str) -> None:
    key = load_private_key(rsa_pem)
    assert key is load_private_key(rsa_pem)
    assert isinstance(key, rsa.RSAPrivateKey)
    assert isinstance(load_private_key(ed_pem), ed25519.Ed25519PrivateKey)
    traditional = _pem(key, serialization.PrivateFormat.TraditionalOpenSSL)
    assert traditional.startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert load_private_key(traditional).public_key() == key.public_key()
    assert repr(SenderKey(KEY_ID, rsa_pem)) == f"SenderKey(key_id='{KEY_ID}')"  # no PEM in logs


ENCRYPTED = serialization.BestAvailableEncryption(b"password")


@pytest.mark.parametrize(
    "make_pem",
    [
        lambda: "not a key",
        lambda: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        lambda: "é",
        lambda: _pem(ec.generate_private_key(ec.SECP256R1())),
        lambda: _pem(dsa.generate_private_key(key_size=1024)),
        lambda: _pem(ed25519.Ed25519PrivateKey.generate(), crypt=ENCRYPTED),
        lambda: public_pem(keys.generate_ed25519_pem()),
    ],
    ids=["garbage", "bad-der", "non-ascii", "ec", "dsa", "encrypted", "public-key"],
)
def test_load_private_key_rejects(make_pem: Any) -> None:
    with pytest.raises(InvalidSigningKey) as info:
        load_private_key(make_pem())
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, OutboxError)
    with pytest.raises(InvalidSigningKey):
        sign(Scheme.CAVAGE, make_pem())


def test_rsa_validation_skipped_only_for_known_pem(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = serialization.load_pem_private_key

    def spy(data: bytes, password: bytes | None, **kwargs: Any) -> Any:
        calls.append(kwargs["unsafe_skip_rsa_key_validation"])
        return real(data, password, **kwargs)

    monkeypatch.setattr(serialization, "load_pem_private_key", spy)
    pem = keys.generate_rsa_pem(3072)
    first = load_private_key(pem)
    keys._load_cached.cache_clear()  # as if evicted from the parsed-key cache
    again = load_private_key(pem)
    assert calls[-2:] == [False, True]
    assert first is not again
    assert isinstance(again, rsa.RSAPrivateKey)
    assert again.key_size == 3072
    assert again.public_key() == first.public_key()


def test_threads_loading_a_new_rsa_key_at_once_validate_it_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validated: list[bool] = []
    real = serialization.load_pem_private_key

    def slow(data: bytes, password: bytes | None, **kwargs: Any) -> Any:
        validated.append(not kwargs["unsafe_skip_rsa_key_validation"])
        time.sleep(0.2)  # both threads are here at once unless one waits for the other
        return real(data, password, **kwargs)

    monkeypatch.setattr(serialization, "load_pem_private_key", slow)
    pem = keys.generate_rsa_pem()
    start = threading.Barrier(2)
    loaded: list[object] = []

    def load() -> None:
        start.wait()
        loaded.append(load_private_key(pem).public_key())

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert validated.count(True) == 1
    assert len(loaded) == 2 and loaded[0] == loaded[1]

"""FEP-8fcf: the followers digest and the header's value."""

from __future__ import annotations

import hashlib

import pytest

from django_outbox.sending.synchronization import followers_digest, synchronization_header


def test_digest_is_the_xor_of_sha256_and_zero_for_none() -> None:
    assert followers_digest([]) == "0" * 64
    one = hashlib.sha256(b"https://a.example/u/1").hexdigest()
    assert followers_digest(["https://a.example/u/1"]) == one
    pair = ["https://a.example/u/1", "https://a.example/u/2"]
    assert followers_digest(pair) == followers_digest(reversed(pair))
    assert followers_digest(pair + pair) == "0" * 64


def test_header_refuses_quotes() -> None:
    assert synchronization_header("c", "u", "d") == 'collectionId="c", url="u", digest="d"'
    with pytest.raises(ValueError):
        synchronization_header('c"', "u", "d")

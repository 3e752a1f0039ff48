"""draft-cavage signatures, checked against implementations that are not ours, and the
input every scheme refuses.

RSA signatures are verified by the ``httpsig`` package (PyCryptodome underneath); it
knows no Ed25519, so ``hs2019``/Ed25519 signatures are checked by a verifier written
here from the draft's text with ``cryptography``.  RFC 9421 is in
``test_signing_rfc9421.py``, keys in ``tests/unit/sending/test_keys.py``.  No Django
settings are needed.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from httpsig.utils import parse_signature_header
from httpsig.verify import HeaderVerifier

from django_outbox.exceptions import OutboxError
from django_outbox.sending import keys
from django_outbox.sending.keys import public_pem
from django_outbox.signing import (
    CAVAGE_COVERED,
    Scheme,
    SigningError,
    fallback_scheme,
)
from tests.support.signing_samples import (
    CONTENT_TYPE,
    DIGEST,
    KEY_ID,
    PATH,
    SYNC,
    WITH_SYNC,
    sign,
)


# draft-cavage
def httpsig_verify(
    headers: dict[str, str], pem: str, path: str = PATH, method: str = "POST"
) -> bool:
    required = list(CAVAGE_COVERED)
    check = HeaderVerifier(
        headers, public_pem(pem), required, method, path, sign_header="signature"
    )
    return bool(check.verify())


def spec_verify(headers: dict[str, str], pem: str, path: str) -> bool:
    """Verify an Ed25519 draft-cavage signature by the draft's rules (section 2.3)."""
    params = dict(parse_signature_header(headers["Signature"]))
    lower = {name.lower(): value for name, value in headers.items()}
    lines = [
        f"{name}: " + (f"post {path}" if name == "(request-target)" else lower[name])
        for name in params["headers"].split(" ")
    ]
    public = serialization.load_pem_public_key(public_pem(pem).encode())
    assert isinstance(public, ed25519.Ed25519PublicKey)
    try:
        public.verify(base64.b64decode(params["signature"]), "\n".join(lines).encode())
    except Exception:
        return False
    return True


def test_cavage_rsa_verified_by_httpsig(rsa_pem: str) -> None:
    headers = sign(Scheme.CAVAGE, rsa_pem)
    assert httpsig_verify(headers, rsa_pem)
    assert list(headers) == ["Host", "Date", "Content-Type", "Digest", "Signature"]
    assert headers["Host"] == "remote.example"
    assert headers["Content-Type"] == CONTENT_TYPE
    assert headers["Digest"] == "SHA-256=" + DIGEST
    assert headers["Signature"].startswith(
        f'keyId="{KEY_ID}",algorithm="rsa-sha256",'
        'headers="(request-target) host date digest content-type",signature="'
    )


def test_cavage_request_target_has_query_and_method(rsa_pem: str) -> None:
    headers = sign(Scheme.CAVAGE, rsa_pem, method="post")
    assert httpsig_verify(headers, rsa_pem, path=PATH)
    assert not httpsig_verify(headers, rsa_pem, path="/users/bob/inbox")
    assert not httpsig_verify(headers, rsa_pem, path="/users/bob/inbox?page=2&x=/")
    assert not httpsig_verify(headers, rsa_pem, method="PUT")


@pytest.mark.parametrize("scheme", list(Scheme))
def test_date_and_created_are_recent_and_follow_now(ed_pem: str, scheme: Scheme) -> None:
    sent = parsedate_to_datetime(sign(scheme, ed_pem)["Date"])
    assert abs(datetime.now(UTC) - sent) < timedelta(seconds=5)
    then = datetime(2024, 3, 1, 13, 0, 5, 999, tzinfo=UTC).astimezone()
    first = sign(scheme, ed_pem, now=then)
    assert first["Date"] == "Fri, 01 Mar 2024 13:00:05 GMT"
    assert first["Signature"] != sign(scheme, ed_pem, now=then + timedelta(1))["Signature"]
    if scheme is Scheme.RFC9421:
        assert f";created={int(then.timestamp())};" in first["Signature-Input"]


def test_cavage_covers_collection_synchronization(rsa_pem: str) -> None:
    headers = sign(Scheme.CAVAGE, rsa_pem, **WITH_SYNC)
    params = parse_signature_header(headers["Signature"])
    assert params["headers"].split(" ") == [*CAVAGE_COVERED, "collection-synchronization"]
    assert headers["Collection-Synchronization"] == SYNC
    assert httpsig_verify(headers, rsa_pem)
    headers["Collection-Synchronization"] = SYNC.replace("b08a", "0000")
    assert not httpsig_verify(headers, rsa_pem)


def test_cavage_ed25519_uses_hs2019(ed_pem: str) -> None:
    headers = sign(Scheme.CAVAGE, ed_pem, **WITH_SYNC)
    assert parse_signature_header(headers["Signature"])["algorithm"] == "hs2019"
    assert spec_verify(headers, ed_pem, PATH)
    assert not spec_verify(headers, ed_pem, "/users/bob/inbox")
    headers["Collection-Synchronization"] = "x"
    assert not spec_verify(headers, ed_pem, PATH)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("Date", "Fri, 01 Mar 2024 12:00:05 GMT"),
        ("Host", "other.example"),
        ("Content-Type", "application/json"),
        # What an attacker who swapped the body would have to send.
        ("Digest", "SHA-256=" + base64.b64encode(hashlib.sha256(b"{}").digest()).decode()),
    ],
)
def test_cavage_tampered_header_or_body_fails(rsa_pem: str, header: str, value: str) -> None:
    headers = sign(Scheme.CAVAGE, rsa_pem)
    assert httpsig_verify(headers, rsa_pem)
    headers[header] = value
    assert not httpsig_verify(headers, rsa_pem)


# Errors and helpers
@pytest.mark.parametrize(
    "overrides",
    [
        {"url": "ftp://remote.example/inbox"},
        {"url": "/inbox"},
        {"url": "https://user:pw@remote.example/inbox"},
        {"url": "https://remote.example:notaport/inbox"},
        {"url": "https://remote.example:99999/inbox"},
        {"method": "PO ST"},
        {"body_sha256": b"short"},
        {"now": datetime(2024, 1, 1)},
        {"content_type": "application/json\r\nX-Evil: 1"},
        {"extra_headers": {"Date": "Fri, 01 Mar 2024 12:00:05 GMT"}},
        {"extra_headers": {"X-A": "1", "x-a": "2"}},
        {"extra_headers": {"Bad Name": "1"}},
        {"extra_headers": {"X-A": "line\nbreak"}},
        {"covered_extra": ["collection-synchronization"]},
        {"extra_headers": {"X-A": "1"}, "covered_extra": ["X-A"]},
        {"extra_headers": {"X-A": "1"}, "covered_extra": "x-a"},
        {"extra_headers": {"X-A": "1"}, "covered_extra": ["x-a", "x-a"]},
        *({"key_id": k} for k in ("", 'https://a.example/"x"', "https://a/\\", "https://é/")),
    ],
)
@pytest.mark.parametrize("scheme", list(Scheme))
def test_bad_input_raises_signing_error(ed_pem: str, scheme: Any, overrides: Any) -> None:
    with pytest.raises(SigningError):
        sign(scheme, ed_pem, **overrides)


def test_scheme_values_and_other() -> None:
    assert issubclass(SigningError, OutboxError)
    assert fallback_scheme(Scheme.CAVAGE) is Scheme.RFC9421
    assert fallback_scheme(Scheme.RFC9421) is Scheme.CAVAGE
    assert (Scheme("draft-cavage"), str(Scheme.RFC9421)) == (Scheme.CAVAGE, "rfc9421")
    plain: Any = "rfc9421"  # a setting's value, not yet a Scheme
    assert sign(plain, keys.generate_ed25519_pem())["Signature"].startswith("sig1=:")
    with pytest.raises(SigningError):
        sign("neither", keys.generate_ed25519_pem())  # type: ignore[arg-type]

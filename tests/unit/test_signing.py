"""Signing and key loading, checked against implementations that are not ours.

draft-cavage RSA signatures are verified by the ``httpsig`` package (PyCryptodome
underneath); it knows no Ed25519, so ``hs2019``/Ed25519 signatures are checked
by a verifier written here from the draft's text with ``cryptography``.
RFC 9421 signatures are made by ``http_message_signatures``' signer, which the
tests check was used, verified by that library's verifier and, independently,
against a signature base rebuilt here from RFC 9421's text with ``cryptography``.
No Django settings are needed.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import http_message_signatures as hms
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa
from httpsig.utils import parse_signature_header
from httpsig.verify import HeaderVerifier

from django_outbox import keys
from django_outbox.exceptions import OutboxError
from django_outbox.keys import InvalidSigningKey, SenderKey, load_private_key, public_pem
from django_outbox.signing import (
    CAVAGE_COVERED,
    RFC9421_COVERED,
    Scheme,
    SigningError,
    fallback_scheme,
)
from django_outbox.signing import http as signing

KEY_ID = "https://example.com/users/alice#main-key"
PATH = "/users/bob/inbox?page=2&x=%2F"
URL = "https://remote.example" + PATH
BODY = b'{"type":"Create","actor":"https://example.com/users/alice","object":"caf\xc3\xa9"}'
SHA256 = hashlib.sha256(BODY).digest()
DIGEST = base64.b64encode(SHA256).decode()
CONTENT_TYPE = 'application/ld+json; profile="https://www.w3.org/ns/activitystreams"'
SYNC = (
    'collectionId="https://example.com/users/alice/followers", '
    'url="https://example.com/users/alice/followers_synchronization", '
    'digest="b08ab6951c7d6cc2b91e17ebd9557da7fae02489728e9332fcb3a97748244d50"'
)
WITH_SYNC: dict[str, Any] = {
    "extra_headers": {"Collection-Synchronization": SYNC},
    "covered_extra": ["collection-synchronization"],
}


@pytest.fixture(scope="module")
def rsa_pem() -> str:
    return keys.generate_rsa_pem()


@pytest.fixture(scope="module")
def ed_pem() -> str:
    return keys.generate_ed25519_pem()


def sign(scheme: Scheme, pem: str, **overrides: Any) -> dict[str, str]:
    key = SenderKey(overrides.pop("key_id", KEY_ID), pem)
    kwargs = {"method": "POST", "url": URL, "body": BODY, "content_type": CONTENT_TYPE}
    return signing.sign_headers(scheme, key, **(kwargs | {"body_sha256": SHA256} | overrides))


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


# RFC 9421
@dataclass
class Received:
    """A request as the receiver reconstructs it: method, target URI and header fields."""

    method: str
    url: str
    headers: dict[str, str]


ALGORITHMS = {"rsa": hms.algorithms.RSA_V1_5_SHA256, "ed25519": hms.algorithms.ED25519}


def verifier(pem: str) -> hms.HTTPMessageVerifier:
    public = serialization.load_pem_public_key(public_pem(pem).encode())
    assert isinstance(public, rsa.RSAPublicKey | ed25519.Ed25519PublicKey)
    which = "ed25519" if isinstance(public, ed25519.Ed25519PublicKey) else "rsa"
    resolver = hms.MappingKeyResolver(public_keys={KEY_ID: public}, private_keys={})
    return hms.HTTPMessageVerifier(signature_algorithm=ALGORITHMS[which], key_resolver=resolver)


@pytest.mark.parametrize("which", ["rsa", "ed25519"])
def test_rfc9421_verified_by_http_message_signatures(rsa_pem: str, ed_pem: str, which: str) -> None:
    pem = rsa_pem if which == "rsa" else ed_pem
    headers = sign(Scheme.RFC9421, pem)
    assert list(headers)[3:] == ["Content-Digest", "Signature-Input", "Signature"]
    assert headers["Content-Digest"] == f"sha-256=:{DIGEST}:"
    # As requests would send it; verify(body=...) also checks Content-Digest.
    request = requests.Request("POST", URL, data=BODY, headers=headers).prepare()
    (result,) = verifier(pem).verify(request, body=BODY, require_components=RFC9421_COVERED)
    assert (result.label, result.body, result.parameters["keyid"]) == ("sig1", BODY, KEY_ID)
    assert result.parameters["alg"] == ("ed25519" if which == "ed25519" else "rsa-v1_5-sha256")
    assert result.covered_components['"@target-uri"'] == URL
    assert result.covered_components['"@authority"'] == "remote.example"


def test_rfc9421_covers_collection_synchronization(ed_pem: str) -> None:
    message = Received("POST", URL, sign(Scheme.RFC9421, ed_pem, **WITH_SYNC))
    required = (*RFC9421_COVERED, "collection-synchronization")
    (result,) = verifier(ed_pem).verify(message, body=BODY, require_components=required)
    assert result.covered_components['"collection-synchronization"'] == SYNC
    message.headers["Collection-Synchronization"] = SYNC.replace("b08a", "0000")
    with pytest.raises(hms.InvalidSignature):
        verifier(ed_pem).verify(message, body=BODY)


@pytest.mark.parametrize(
    ("url", "host", "seen_url"),
    [
        ("https://Remote.Example:443/inbox", "remote.example", "https://remote.example/inbox"),
        ("http://remote.example:80/inbox", "remote.example", "http://remote.example/inbox"),
        ("https://remote.example:8443/a?b=c", "remote.example:8443", None),
        ("https://remote.example", "remote.example", "https://remote.example/"),
        ("http://[2001:db8::1]:8080/inbox", "[2001:db8::1]:8080", None),
        ("https://remote.example/inbox#frag", "remote.example", "https://remote.example/inbox"),
        ("https://gw.example/.well-known/apgateway/did:key:z6Mk/inbox", "gw.example", None),
        # Signed as requests puts them on the wire, which is what the receiver sees.
        (
            "https://r.example/%7Eb%2F/caf\u00e9 x?q=%7E",
            "r.example",
            "https://r.example/~b%2F/caf%C3%A9%20x?q=~",
        ),
    ],
)
def test_rfc9421_authority_and_target_as_the_receiver_sees_them(
    ed_pem: str, url: str, host: str, seen_url: str | None
) -> None:
    headers = sign(Scheme.RFC9421, ed_pem, url=url)
    assert headers["Host"] == host
    (result,) = verifier(ed_pem).verify(Received("POST", seen_url or url, headers), body=BODY)
    assert result.covered_components['"@authority"'] == host


def test_signs_the_url_as_requests_sends_it(ed_pem: str) -> None:
    url = "https://b\u00fccher.example/%7Eb/caf\u00e9?q=%7E"
    headers = sign(Scheme.RFC9421, ed_pem, url=url)
    assert headers["Host"] == "xn--bcher-kva.example"
    request = requests.Request("POST", url, data=BODY, headers=headers).prepare()
    verifier(ed_pem).verify(request, body=BODY)


def spy_on_library_signer(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any, Any]]:
    """Record (signer, message, keyword arguments) of every ``HTTPMessageSigner.sign`` call."""
    calls: list[tuple[Any, Any, Any]] = []
    real = hms.HTTPMessageSigner.sign

    def spy(self: hms.HTTPMessageSigner, message: Any, **kwargs: Any) -> None:
        calls.append((self, message, kwargs))
        real(self, message, **kwargs)

    monkeypatch.setattr(hms.HTTPMessageSigner, "sign", spy)
    return calls


@pytest.mark.parametrize("which", ["rsa", "ed25519"])
@pytest.mark.parametrize("covered_extra", [(), ("collection-synchronization",)])
def test_rfc9421_made_by_library_signer(
    monkeypatch: pytest.MonkeyPatch,
    rsa_pem: str,
    ed_pem: str,
    which: str,
    covered_extra: tuple[str, ...],
) -> None:
    pem = rsa_pem if which == "rsa" else ed_pem
    alg = ALGORITHMS[which].algorithm_id
    calls = spy_on_library_signer(monkeypatch)
    now = datetime(2024, 3, 1, 13, 0, 5, tzinfo=UTC)
    extra = {"Collection-Synchronization": SYNC}
    headers = sign(Scheme.RFC9421, pem, now=now, extra_headers=extra, covered_extra=covered_extra)

    # One library call wrote both signature fields, on the minimal request view.
    ((signer, message, kwargs),) = calls
    assert signer.signature_algorithm is ALGORITHMS[which]
    assert signer.key_resolver.resolve_private_key(KEY_ID) is load_private_key(pem)
    assert type(message) is signing._Request
    assert (message.method, message.url) == ("POST", URL)
    covered = {"Content-Digest": headers["Content-Digest"]}
    covered |= {"Collection-Synchronization": SYNC} if covered_extra else {}
    assert message.headers == covered | {
        "Signature-Input": headers["Signature-Input"],
        "Signature": headers["Signature"],
    }
    # The precomputed digest is reused: no body is handed over to be hashed again.
    assert "body" not in kwargs
    assert kwargs["use_existing_digest"] is True
    assert kwargs["covered_component_ids"] == (*RFC9421_COVERED, *covered_extra)

    # The library's serialisation: inner list, then created, keyid, alg; byte sequence.
    components = " ".join(f'"{name}"' for name in (*RFC9421_COVERED, *covered_extra))
    params = f'({components});created=1709298005;keyid="{KEY_ID}";alg="{alg}"'
    assert headers["Signature-Input"] == "sig1=" + params
    assert headers["Signature"].startswith("sig1=:")
    assert headers["Signature"].endswith(":")
    signature = base64.b64decode(headers["Signature"][6:-1], validate=True)

    # RFC 9421 section 2.5 signature base, rebuilt here, verified with cryptography.
    lines = [
        '"@method": POST',
        '"@target-uri": ' + URL,
        '"@authority": remote.example',
        f'"content-digest": sha-256=:{DIGEST}:',
        *(f'"{name}": {SYNC}' for name in covered_extra),
        '"@signature-params": ' + params,
    ]
    public = load_private_key(pem).public_key()
    ALGORITHMS[which](public_key=public).verify(signature, "\n".join(lines).encode())

    # And the library's verifier accepts it as the receiver would see the request.
    required = (*RFC9421_COVERED, *covered_extra)
    (result,) = verifier(pem).verify(
        Received("POST", URL, headers), body=BODY, require_components=required, max_age=None
    )
    assert result.parameters == {"created": 1709298005, "keyid": KEY_ID, "alg": alg}


def test_rfc9421_signer_and_key_resolver_made_once_per_key(
    monkeypatch: pytest.MonkeyPatch, rsa_pem: str, ed_pem: str
) -> None:
    calls = spy_on_library_signer(monkeypatch)
    sign(Scheme.RFC9421, ed_pem)
    sign(Scheme.RFC9421, ed_pem, url="https://elsewhere.example/inbox")
    sign(Scheme.RFC9421, ed_pem, key_id="https://example.com/users/carol#main-key")
    sign(Scheme.RFC9421, rsa_pem)
    first, again, other_id, other_key = (signer for signer, _, _ in calls)
    assert again is first
    assert again.key_resolver is first.key_resolver
    assert len({id(first), id(other_id), id(other_key)}) == 3
    with pytest.raises(KeyError):  # each resolver knows only its own key id
        first.key_resolver.resolve_private_key("https://example.com/users/carol#main-key")


def test_rfc9421_uses_the_given_digest_without_hashing_the_body(ed_pem: str) -> None:
    # Were the body hashed (or checked) again, this mismatched digest would be noticed.
    other_sha256 = hashlib.sha256(b"other").digest()
    headers = sign(Scheme.RFC9421, ed_pem, body_sha256=other_sha256)
    expected = base64.b64encode(other_sha256).decode()
    assert headers["Content-Digest"] == f"sha-256=:{expected}:"
    verifier(ed_pem).verify(Received("POST", URL, headers), body=b"other")


def test_rfc9421_library_or_key_failure_is_a_signing_error(
    monkeypatch: pytest.MonkeyPatch, ed_pem: str
) -> None:
    def broken(self: Any, message: bytes) -> bytes:
        raise ValueError("OpenSSL said no")

    monkeypatch.setattr(hms.algorithms.ED25519, "sign", broken)
    with pytest.raises(SigningError, match="OpenSSL said no"):
        sign(Scheme.RFC9421, ed_pem)


@pytest.mark.parametrize(
    ("change", "value"),
    [
        ("body", BODY.replace(b"Create", b"Delete")),
        ("url", "https://remote.example/users/carol/inbox?page=2&x=%2F"),
        ("url", "https://other.example/users/bob/inbox?page=2&x=%2F"),
        ("url", "https://remote.example/users/bob/inbox?page=2&x=/"),
        ("method", "PUT"),
        ("Content-Digest", "sha-256=:" + base64.b64encode(bytes(32)).decode() + ":"),
    ],
)
def test_rfc9421_tampered_request_fails(rsa_pem: str, change: str, value: Any) -> None:
    message = Received("POST", URL, sign(Scheme.RFC9421, rsa_pem))
    verifier(rsa_pem).verify(message, body=BODY)
    body = BODY
    if change == "body":
        body = value
    elif change in {"url", "method"}:
        setattr(message, change, value)
    else:
        message.headers[change] = value
    with pytest.raises(hms.InvalidSignature):
        verifier(rsa_pem).verify(message, body=body)


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


# Keys
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

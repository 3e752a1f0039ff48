"""RFC 9421 signatures: made by ``http_message_signatures``' signer (the tests check it
was used), verified by that library's verifier and, independently, against a signature
base rebuilt here from RFC 9421's text with ``cryptography``."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import http_message_signatures as hms
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from django_outbox.sending.keys import load_private_key, public_pem
from django_outbox.signing import RFC9421_COVERED, Scheme, SigningError
from django_outbox.signing import rfc9421 as signing
from django_outbox.transport.target import parse_target
from tests.support.signing_samples import (
    BODY,
    DIGEST,
    KEY_ID,
    SYNC,
    URL,
    WITH_SYNC,
    sign,
)


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
        ("https://gw.example/.well-known/apgateway/did:key:z6Mk/inbox", "gw.example", None),
        # Signed as the transport puts them on the wire (parse_target), which is what
        # the receiver sees.
        (
            "https://r.example/%7eb%2F/caf\u00e9?q=%7e",
            "r.example",
            "https://r.example/%7Eb%2F/caf%C3%A9?q=%7E",
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


def test_signs_the_url_as_the_transport_sends_it(ed_pem: str) -> None:
    url = "https://b\u00fccher.example/%7eb/caf\u00e9?q=%7E"
    headers = sign(Scheme.RFC9421, ed_pem, url=url)
    assert headers["Host"] == "xn--bcher-kva.example"
    wire = parse_target(url).url
    assert wire == "https://xn--bcher-kva.example/%7Eb/caf%C3%A9?q=%7E"
    verifier(ed_pem).verify(Received("POST", wire, headers), body=BODY)


@pytest.mark.parametrize(
    "url",
    [
        "https://remote.example/inbox#frag",
        "http://h\\.example/inbox",
        "https://r.example/a b",
        "https://.bad.example/inbox",
        "https://xn--abc.example/inbox",
    ],
)
def test_urls_the_transport_would_read_otherwise_are_not_signed(ed_pem: str, url: str) -> None:
    with pytest.raises(SigningError, match="cannot sign for this URL"):
        sign(Scheme.CAVAGE, ed_pem, url=url)


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

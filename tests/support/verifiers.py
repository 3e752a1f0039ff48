"""Checking signatures of recorded requests with implementations that are not ours.

draft-cavage: the ``httpsig`` package's ``HeaderVerifier``.  Its RSA check is
pycryptodome's, which returns ``None`` on success and raises ``ValueError``
on a bad signature, so success is "returned without raising, not False".
RFC 9421: ``http_message_signatures``' ``HTTPMessageVerifier``.
"""

from __future__ import annotations

import hashlib
from base64 import b64encode
from collections.abc import Sequence
from typing import Any

import http_message_signatures as hms
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from httpsig.verify import HeaderVerifier

from django_outbox.sending.keys import public_pem


def _headers(request: Any) -> dict[str, str]:
    return {name: value for name, value in request.headers.items()}


def verify_cavage(request: Any, private_pem: str, covered: Sequence[str] = ()) -> bool:
    """Whether a recorded request carries a valid draft-cavage RSA signature and digest,
    covering the usual headers and ``covered`` (lower-case names) as well."""
    headers = _headers(request)
    digest = "SHA-256=" + b64encode(hashlib.sha256(request.body).digest()).decode()
    if headers.get("Digest") != digest:
        return False
    checker = HeaderVerifier(
        headers,
        public_pem(private_pem),
        ["(request-target)", "host", "date", "digest", "content-type", *covered],
        request.method,
        request.path,
        sign_header="signature",
    )
    try:
        return checker.verify() is not False
    except ValueError:
        return False


def verify_rfc9421(request: Any, url: str, private_pem: str, key_id: str) -> bool:
    """Whether a recorded request carries a valid RFC 9421 signature over ``url``."""
    public = serialization.load_pem_public_key(public_pem(private_pem).encode())
    algorithm = (
        hms.algorithms.ED25519
        if isinstance(public, ed25519.Ed25519PublicKey)
        else hms.algorithms.RSA_V1_5_SHA256
    )
    resolver = hms.MappingKeyResolver(public_keys={key_id: public}, private_keys={})
    verifier = hms.HTTPMessageVerifier(signature_algorithm=algorithm, key_resolver=resolver)
    prepared = requests.Request(
        request.method, url, data=request.body, headers=_headers(request)
    ).prepare()
    try:
        verifier.verify(
            prepared,
            body=request.body,
            require_components=("@method", "@target-uri", "@authority", "content-digest"),
        )
    except hms.InvalidSignature:
        return False
    return True

"""Checking, in a test, that a request reached an inbox signed by the right key.

A receiving server checks a draft-cavage or RFC 9421 signature before it trusts
a delivery; :func:`verify_signature` does the same checks on an
:class:`~django_outbox.testing.inbox.InboxRequest`, so an application can
assert what its actors' deliveries carry.  RFC 9421 is checked by
``http_message_signatures``' own verifier; draft-cavage by rebuilding the
signing string the draft defines.  :func:`verify_webhook` checks a webhook as
a Standard Webhooks receiver does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time

import requests
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from http_message_signatures import HTTPMessageVerifier, MappingKeyResolver
from http_message_signatures import InvalidSignature as InvalidMessageSignature
from http_message_signatures.algorithms import ED25519, RSA_V1_5_SHA256

from django_outbox.sending.keys import SenderKey, load_private_key
from django_outbox.signing import RFC9421_COVERED
from django_outbox.signing.webhooks import WebhookSecret
from django_outbox.testing.inbox import InboxRequest

_PARAMETER = re.compile(r'([A-Za-z]+)="([^"]*)"')


def verify_signature(request: InboxRequest, key: SenderKey) -> bool:
    """Whether ``request`` carries a valid signature by ``key``, in either scheme.

    The signature must name ``key.key_id``, verify with the public half of
    ``key``, cover what the scheme requires (the method, target and host;
    ``Date`` for draft-cavage) and the body's digest, and the digest must match
    the body received.
    """
    if "Signature-Input" in request.headers:
        return _verify_rfc9421(request, key)
    if "Signature" in request.headers:
        return _verify_cavage(request, key)
    return False


def _verify_cavage(request: InboxRequest, key: SenderKey) -> bool:
    params = dict(_PARAMETER.findall(request.headers["Signature"]))
    covered = params.get("headers", "date").split()
    expected = "SHA-256=" + base64.b64encode(hashlib.sha256(request.body).digest()).decode()
    if params.get("keyId") != key.key_id or request.headers.get("Digest") != expected:
        return False
    if not {"(request-target)", "host", "date", "digest"} <= set(covered):
        return False
    lines = [_cavage_line(name, request) for name in covered]
    if None in lines:
        return False
    data = "\n".join(line for line in lines if line is not None).encode()
    public = load_private_key(key.private_key_pem).public_key()
    try:
        signature = base64.b64decode(params.get("signature", ""), validate=True)
        if isinstance(public, RSAPublicKey):
            public.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
        else:
            public.verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def _cavage_line(name: str, request: InboxRequest) -> str | None:
    """One line of the draft-cavage signing string, or None if the header is missing."""
    if name == "(request-target)":
        return f"(request-target): {request.method.lower()} {request.path}"
    value = request.headers.get(name)
    return None if value is None else f"{name}: {value}"


def _verify_rfc9421(request: InboxRequest, key: SenderKey) -> bool:
    public = load_private_key(key.private_key_pem).public_key()
    algorithm = RSA_V1_5_SHA256 if isinstance(public, RSAPublicKey) else ED25519
    resolver = MappingKeyResolver(public_keys={key.key_id: public}, private_keys={})
    verifier = HTTPMessageVerifier(signature_algorithm=algorithm, key_resolver=resolver)
    message = requests.Request(
        request.method, request.url, headers=dict(request.headers), data=request.body
    ).prepare()
    try:
        verifier.verify(message, body=request.body, require_components=RFC9421_COVERED)
    except InvalidMessageSignature:
        return False
    return True


def verify_webhook(request: InboxRequest, secret: str, *, tolerance: float | None = 300.0) -> bool:
    """Whether ``request`` carries a valid Standard Webhooks signature by ``secret``.

    ``secret`` is what the endpoint's owner holds: a ``whsec_`` secret, which
    one ``v1`` signature of the request must match, or for ``v1a`` the
    ``whpk_`` public key (or the ``whsk_`` signing key itself).  As a receiver
    requires, ``webhook-id`` and ``webhook-timestamp`` must be present and the
    timestamp within ``tolerance`` seconds of now (``None``: any time).
    """
    msg_id = request.headers.get("webhook-id")
    stamp = request.headers.get("webhook-timestamp")
    signatures = request.headers.get("webhook-signature")
    if not (msg_id and stamp and stamp.isdigit() and signatures):
        return False
    if tolerance is not None and abs(time.time() - int(stamp)) > tolerance:
        return False
    content = f"{msg_id}.{stamp}.".encode() + request.body
    offered = [entry.partition(",")[::2] for entry in signatures.split(" ")]
    if secret.startswith("whpk_"):
        public = secret
    else:
        parsed = WebhookSecret(secret)
        if parsed.public_key is None:  # whsec_: compare with the expected signature
            expected = parsed.sign(content).encode()
            return any(
                scheme == "v1" and hmac.compare_digest(f"v1,{value}".encode(), expected)
                for scheme, value in offered
            )
        public = parsed.public_key
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public.removeprefix("whpk_")))
    return any(scheme == "v1a" and _ed25519_ok(key, value, content) for scheme, value in offered)


def _ed25519_ok(key: Ed25519PublicKey, signature: str, content: bytes) -> bool:
    try:
        key.verify(base64.b64decode(signature, validate=True), content)
    except (InvalidSignature, binascii.Error):
        return False
    return True

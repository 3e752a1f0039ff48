"""Checking Standard Webhooks signatures with implementations that are not ours.

``v1`` (HMAC-SHA256): ``standardwebhooks``, the specification's reference
library, exactly as a receiving view calls it.  It skips ``v1a``, so Ed25519
signatures are checked with ``cryptography`` against the ``whpk_`` public key.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook


def verify_v1(secret: str, body: bytes, headers: Mapping[str, str]) -> Any:
    """The JSON payload, once the reference library accepted the request (else it raises)."""
    return Webhook(secret).verify(body, dict(headers.items()))


def verify_v1a(public_key: str, body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether one ``v1a`` signature of ``headers`` verifies with ``public_key`` (``whpk_``)."""
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key.removeprefix("whpk_")))
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    for entry in headers["webhook-signature"].split(" "):
        scheme, _, signature = entry.partition(",")
        if scheme != "v1a":
            continue
        try:
            key.verify(base64.b64decode(signature), content)
        except InvalidSignature:
            continue
        return True
    return False

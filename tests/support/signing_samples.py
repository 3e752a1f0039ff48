"""The request the signing tests sign, and ``sign()``, which signs it with overrides."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from django_outbox.sending.keys import SenderKey
from django_outbox.signing import Scheme
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


def sign(scheme: Scheme, pem: str, **overrides: Any) -> dict[str, str]:
    key = SenderKey(overrides.pop("key_id", KEY_ID), pem)
    kwargs = {"method": "POST", "url": URL, "body": BODY, "content_type": CONTENT_TYPE}
    return signing.sign_headers(scheme, key, **(kwargs | {"body_sha256": SHA256} | overrides))

"""The naive design the package is measured against: one Celery task per inbox.

Loaded into a benchmark worker with ``-I bench.naive_task`` and sent by name
(``bench.naive_deliver``) to the queue ``bench.naive``.  Each task carries its own
copy of the body, parses the sender's PEM key (with OpenSSL's full RSA checks),
signs draft-cavage and calls ``requests.post`` on a new connection, as a first
implementation in a Django app typically does.  ``cached=True`` is the usual first
fix: the parsed key and a keep-alive ``requests.Session`` kept per process.
Progress is counted in Redis (``bench:naive:done``, ``bench:naive:last``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from email.utils import formatdate
from typing import Any
from urllib.parse import urlsplit

import redis
import requests
from celery import shared_task
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

_keys: dict[str, Any] = {}
_state: dict[str, Any] = {}


def _redis() -> redis.Redis:
    if "redis" not in _state:
        _state["redis"] = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _state["redis"]  # type: ignore[no-any-return]


def cavage_headers(key: rsa.RSAPrivateKey, key_id: str, url: str, body: bytes) -> dict[str, str]:
    """Mastodon-style draft-cavage headers for a POST of ``body`` to ``url``."""
    parts = urlsplit(url)
    date = formatdate(usegmt=True)
    digest = "SHA-256=" + base64.b64encode(hashlib.sha256(body).digest()).decode()
    content_type = "application/activity+json"
    signed = (
        f"(request-target): post {parts.path or '/'}\nhost: {parts.netloc}\ndate: {date}\n"
        f"digest: {digest}\ncontent-type: {content_type}"
    )
    signature = base64.b64encode(key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256()))
    return {
        "Host": parts.netloc,
        "Date": date,
        "Digest": digest,
        "Content-Type": content_type,
        "Signature": (
            f'keyId="{key_id}",algorithm="rsa-sha256",'
            f'headers="(request-target) host date digest content-type",'
            f'signature="{signature.decode()}"'
        ),
    }


@shared_task(name="bench.naive_deliver", ignore_result=True, acks_late=True)
def naive_deliver(inbox: str, body: str, key_id: str, key_pem: str, cached: bool = False) -> int:
    """Sign and POST ``body`` to ``inbox``; count it in Redis; return the status."""
    if cached:
        key = _keys.get(key_pem)
        if key is None:
            key = _keys[key_pem] = serialization.load_pem_private_key(key_pem.encode(), None)
        session = _state.setdefault("session", requests.Session())
        post = session.post
    else:
        key = serialization.load_pem_private_key(key_pem.encode(), None)
        post = requests.post
    data = body.encode()
    response = post(
        inbox, data=data, headers=cavage_headers(key, key_id, inbox, data), timeout=(5, 30)
    )
    pipe = _redis().pipeline()
    pipe.incr("bench:naive:done")
    pipe.set("bench:naive:last", repr(time.time()))
    pipe.execute()
    return response.status_code

"""FEP-8fcf Collection-Synchronization: the followers digest and its header.

A delivery sent with ``Batch(synchronize_collection=True)`` carries a
``Collection-Synchronization`` header, covered by the signature, that the
application's ``OUTBOX_COLLECTION_SYNCHRONIZATION`` callable writes for the
sender and the inbox (it knows the followers).  These helpers compute what
goes in it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def followers_digest(follower_ids: Iterable[str]) -> str:
    """XOR of the SHA-256 of each follower id, in hex; 64 zeros when there are none.

    Pass only the followers on the receiving instance's origin, as FEP-8fcf asks.
    """
    value = 0
    for follower in follower_ids:
        value ^= int.from_bytes(hashlib.sha256(follower.encode()).digest(), "big")
    return f"{value:064x}"


def synchronization_header(collection_id: str, url: str, digest: str) -> str:
    """The header value: the followers collection, where to list it, and the digest."""
    for name, value in (("collectionId", collection_id), ("url", url), ("digest", digest)):
        if '"' in value or "\\" in value:
            raise ValueError(f"{name} cannot contain quotes or backslashes: {value!r}")
    return f'collectionId="{collection_id}", url="{url}", digest="{digest}"'

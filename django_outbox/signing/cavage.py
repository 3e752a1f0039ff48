"""draft-cavage HTTP Signatures, as Mastodon signs and verifies them.

The signing string is the covered headers, one ``name: value`` a line, signed with
RSA-SHA256 (PKCS #1 v1.5) or Ed25519; the ``Signature`` header names the key, the
algorithm (``hs2019`` for Ed25519, which draft-cavage has no name of its own for)
and the covered headers.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from django_outbox.exceptions import SigningError
from django_outbox.sending.keys import PrivateKey

CAVAGE_COVERED = ("(request-target)", "host", "date", "digest", "content-type")
"""Headers every draft-cavage signature covers, in order, as Mastodon signs them."""

_PKCS1V15 = padding.PKCS1v15()
_SHA256 = hashes.SHA256()


def cavage_signature(
    private_key: PrivateKey, key_id: str, lines: Sequence[str], covered_extra: Sequence[str]
) -> str:
    """The ``Signature`` header's value for the signing string ``lines`` (those of
    :data:`CAVAGE_COVERED`, then of ``covered_extra``)."""
    signature = _sign(private_key, "\n".join(lines))
    algorithm = "rsa-sha256" if isinstance(private_key, RSAPrivateKey) else "hs2019"
    covered = " ".join((*CAVAGE_COVERED, *covered_extra))
    return f'keyId="{key_id}",algorithm="{algorithm}",headers="{covered}",signature="{signature}"'


def _sign(private_key: PrivateKey, base: str) -> str:
    """Sign the ASCII draft-cavage signing string and return the signature in base64."""
    data = base.encode("ascii")
    try:
        if isinstance(private_key, RSAPrivateKey):
            raw = private_key.sign(data, _PKCS1V15, _SHA256)
        else:
            raw = private_key.sign(data)
    except Exception as exc:  # OpenSSL failures surface as assorted exception types.
        raise SigningError(f"signing failed: {exc}") from exc
    return base64.b64encode(raw).decode("ascii")

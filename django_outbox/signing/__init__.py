"""How a delivery is signed: HTTP Signatures for ActivityPub, Standard Webhooks for webhooks.

``http`` builds draft-cavage and RFC 9421 signatures; ``schemes`` remembers
which of the two each origin accepted; ``webhooks`` signs Standard Webhooks.
"""

from django_outbox.signing.http import (
    CAVAGE_COVERED,
    RFC9421_COVERED,
    RFC9421_LABEL,
    Scheme,
    SigningError,
    fallback_scheme,
    sign_headers,
)

__all__ = [
    "CAVAGE_COVERED",
    "RFC9421_COVERED",
    "RFC9421_LABEL",
    "Scheme",
    "SigningError",
    "fallback_scheme",
    "sign_headers",
]

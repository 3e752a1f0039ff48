"""How a delivery is signed: HTTP Signatures for ActivityPub, Standard Webhooks for webhooks.

``http`` checks a request and writes the headers both HTTP Signature schemes
share, ``cavage`` and ``rfc9421`` make each scheme's signature; ``schemes``
remembers which of the two each origin accepted; ``webhooks`` signs Standard
Webhooks.  :class:`SigningError` is one of the package's exceptions.
"""

from django_outbox.exceptions import SigningError
from django_outbox.signing.cavage import CAVAGE_COVERED
from django_outbox.signing.http import Scheme, fallback_scheme, sign_headers
from django_outbox.signing.rfc9421 import RFC9421_COVERED, RFC9421_LABEL

__all__ = [
    "CAVAGE_COVERED",
    "RFC9421_COVERED",
    "RFC9421_LABEL",
    "Scheme",
    "SigningError",
    "fallback_scheme",
    "sign_headers",
]

"""The demo's webhook secret resolver: fixed test secrets, chosen by the endpoint's path.

The secrets are made-up test values, shared by the test process and the
worker processes.  The sender ``SHOP`` has endpoints everywhere; any other
sender has none.  By the last segment of the endpoint's path:

* ``.../ed25519``: the Ed25519 signing key (``v1a``);
* ``.../rotating``: the new and the old secret, both signing (a rotation);
* ``.../unknown``: no secret (``None``);
* anything else: ``SECRET`` (``v1``).
"""

from __future__ import annotations

import base64

from django_outbox.signing.webhooks import WebhookKeys

SHOP = "shop"
SECRET = "whsec_" + base64.b64encode(b"demo webhook secret, 32 bytes!!!").decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"the secret before the rotation").decode()
SIGNING_KEY = "whsk_" + base64.b64encode(b"demo ed25519 seed, thirty-two b.").decode()


def secrets(sender: str, endpoint: str) -> WebhookKeys | str | None:
    """The secrets ``sender`` signs ``endpoint``'s webhooks with, or ``None``."""
    if sender != SHOP:
        return None
    last = endpoint.rstrip("/").rsplit("/", 1)[-1]
    if last == "unknown":
        return None
    if last == "ed25519":
        return SIGNING_KEY
    if last == "rotating":
        return WebhookKeys(SECRET, OLD_SECRET)
    return SECRET

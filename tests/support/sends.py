"""What the tests of ``send()`` compare: the host the transport contacts, the Host signed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib

from django_outbox.models import Delivery, Message
from django_outbox.sending.keys import SenderKey, generate_ed25519_pem
from django_outbox.signing import Scheme, sign_headers
from django_outbox.transport import ResolveError, Transport

ACTIVITY = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Create", "id": "x"}
_KEY = SenderKey("https://sender.example/actor#key", generate_ed25519_pem())


def inboxes(count: int, label: str = "", *, hosts: int = 0, path: str = "inbox") -> list[str]:
    """``count`` distinct inbox URLs: all on ``{label}.example`` when a label is given (a
    host of the test's own, so that no test sees another's remembered signature scheme
    or circuit breaker), else spread over ``hosts`` hosts (each on its own by default)."""
    spread = hosts or count

    def host(i: int) -> str:
        return f"{label}.example" if label else f"h{i % spread}.example"

    return [f"https://{host(i)}/u{i}/{path}" for i in range(count)]


class RecordingTransport(Transport):
    """A transport that records which (host, port) it would resolve and connect to."""

    def __init__(self) -> None:
        super().__init__(user_agent="test")
        self.contacted: list[tuple[str, int]] = []

    async def _addresses(self, host: str, port: int) -> list[str]:
        self.contacted.append((host, port))
        raise ResolveError("recorded, not resolved")


@functools.cache
def _recording() -> RecordingTransport:
    return RecordingTransport()  # made once: a transport loads the system's CA certificates


def contacted_host(url: str) -> str:
    """The host the transport resolves and connects to for a POST to ``url``."""
    transport = _recording()
    transport.contacted.clear()
    with contextlib.suppress(ResolveError):
        asyncio.run(transport.post(url, {}, b"{}"))
    ((host, _),) = transport.contacted
    return host


def signed_host_header(url: str) -> str:
    """The ``Host`` header a signature for ``url`` covers (and the transport sends)."""
    return sign_headers(
        Scheme.CAVAGE,
        _KEY,
        method="POST",
        url=url,
        body=b"{}",
        content_type="application/activity+json",
        body_sha256=hashlib.sha256(b"{}").digest(),
    )["Host"]


def rows_written() -> int:
    """Messages and deliveries in the database (slices of inboxes belong to a message)."""
    return Message.objects.count() + Delivery.objects.count()

"""The demo's FEP-8fcf hook: every actor has two followers on each receiving origin."""

from __future__ import annotations

from urllib.parse import urlsplit

from django_outbox.sending.synchronization import followers_digest, synchronization_header


def followers_on(inbox: str) -> list[str]:
    """The demo actor's followers on the inbox's origin."""
    parts = urlsplit(inbox)
    origin = f"{parts.scheme}://{parts.netloc}"
    return [f"{origin}/users/one", f"{origin}/users/two"]


def collection_synchronization(sender: str, inbox: str) -> str:
    """The Collection-Synchronization header for ``sender`` delivering to ``inbox``."""
    digest = followers_digest(followers_on(inbox))
    return synchronization_header(
        f"{sender}/followers", f"{sender}/followers_synchronization", digest
    )

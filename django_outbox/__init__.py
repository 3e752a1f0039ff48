"""django_outbox: signed, reliable delivery of ActivityPub activities and webhooks.

``from django_outbox import outbox, Batch`` and call ``outbox.send(actor,
activity, recipients)`` or ``outbox.send_webhook(sender, payload, endpoints)``
inside a view's transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Batch", "PortableInbox", "Progress", "Recipient", "WebhookKeys", "outbox"]

if TYPE_CHECKING:
    from django_outbox.api import outbox
    from django_outbox.batch import Batch
    from django_outbox.portable import PortableInbox
    from django_outbox.progress import Progress
    from django_outbox.recipients import Recipient
    from django_outbox.signing.webhooks import WebhookKeys

_EXPORTS = {
    "outbox": "django_outbox.api",
    "Batch": "django_outbox.batch",
    "PortableInbox": "django_outbox.portable",
    "Progress": "django_outbox.progress",
    "Recipient": "django_outbox.recipients",
    "WebhookKeys": "django_outbox.signing.webhooks",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the package does not import models before apps are ready.
    if name not in _EXPORTS:
        raise AttributeError(name)
    from importlib import import_module

    return getattr(import_module(_EXPORTS[name]), name)

"""django_outbox: signed, reliable delivery of ActivityPub activities and webhooks.

``from django_outbox import outbox, Batch`` and call ``outbox.send(actor,
activity, recipients)`` or ``outbox.send_webhook(sender, payload, endpoints)``
inside a view's transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_outbox import moved

moved.install()

__all__ = ["Batch", "PortableInbox", "Progress", "Recipient", "WebhookKeys", "outbox"]

if TYPE_CHECKING:
    from django_outbox.sending.batch import Batch
    from django_outbox.sending.outbox import outbox
    from django_outbox.sending.portable import PortableInbox
    from django_outbox.sending.recipients import Recipient
    from django_outbox.signing.webhooks import WebhookKeys
    from django_outbox.status.progress import Progress

_EXPORTS = {
    "outbox": "django_outbox.sending.outbox",
    "Batch": "django_outbox.sending.batch",
    "PortableInbox": "django_outbox.sending.portable",
    "Progress": "django_outbox.status.progress",
    "Recipient": "django_outbox.sending.recipients",
    "WebhookKeys": "django_outbox.signing.webhooks",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the package does not import models before apps are ready.
    if name not in _EXPORTS:
        raise AttributeError(name)
    from importlib import import_module

    return getattr(import_module(_EXPORTS[name]), name)

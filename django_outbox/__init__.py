"""django_outbox: signed, reliable delivery of ActivityPub activities and webhooks.

``from django_outbox import outbox, Batch`` and call ``outbox.send(actor,
activity, inboxes)`` inside a view's transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Batch", "outbox"]

if TYPE_CHECKING:
    from django_outbox.api import outbox
    from django_outbox.batch import Batch


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the package does not import models before apps are ready.
    if name == "outbox":
        from django_outbox.api import outbox

        return outbox
    if name == "Batch":
        from django_outbox.batch import Batch

        return Batch
    raise AttributeError(name)

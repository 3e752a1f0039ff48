"""Testing an application that sends with django_outbox: no worker, broker or network.

:func:`captured_sends` (or the ``outbox_capture`` pytest fixture) records
every send committed while it is active and publishes nothing to Celery; the
recorded sends can be delivered in the test's own thread to fake inboxes,
through the package's real claiming, signing, attempt and recording code.
See ``docs/testing.md``.

The ``outbox_capture`` fixture lives in :mod:`django_outbox.testing.pytest_plugin`,
the one module here that imports pytest.
"""

from __future__ import annotations

from django_outbox.testing.capture import (
    CapturedSend,
    CaptureEnded,
    OutboxCapture,
    PublishedTask,
    captured_sends,
)
from django_outbox.testing.delivery import DeliveryLoop
from django_outbox.testing.inbox import Answer, FakeInbox, Handler, InboxRequest
from django_outbox.testing.signatures import verify_signature, verify_webhook

__all__ = [
    "Answer",
    "CaptureEnded",
    "CapturedSend",
    "DeliveryLoop",
    "FakeInbox",
    "Handler",
    "InboxRequest",
    "OutboxCapture",
    "PublishedTask",
    "captured_sends",
    "verify_signature",
    "verify_webhook",
]

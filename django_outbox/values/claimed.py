"""What a claim hands the worker, and what travels with each attempt to the recorder.

A claim returns :class:`ClaimedRow` tuples; a message's sending parts are
:class:`MessageData`, read once and kept by the worker (a body never changes).
Every layer passes them on, so they live here, above nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from django.db.models import TextChoices


class Signing(TextChoices):
    """How a message's deliveries are signed, which decides who provides the key."""

    HTTP_SIGNATURES = "http-signatures", "HTTP Signatures (ActivityPub)"
    STANDARD_WEBHOOKS = "standard-webhooks", "Standard Webhooks"


class ClaimedRow(NamedTuple):
    """One delivery as its claim returned it: what sending and recording it need."""

    id: int
    message_id: int
    inbox: str
    #: The inbox's host name (see ``Delivery.host``), which caps and breakers count by.
    host: str
    #: Gateways to try in order (portable inboxes), or empty.
    via: list[str]
    lane: str
    ordering_key: str
    #: Attempts spent, this one included.
    attempts: int
    #: The claim's token, which every write of the attempt's outcome is conditional on.
    token: str


class MessageData(NamedTuple):
    """The parts of a stored message that sending and recording need."""

    id: int
    sender: str
    body: bytes
    body_sha256: bytes
    content_type: str
    deadline: datetime | None
    activity_type: str
    synchronize_collection: bool
    max_attempts: int
    #: When ``send`` stored it: the start of each delivery's send-to-settle time.
    created_at: datetime | None = None
    #: How its deliveries are signed: a :class:`Signing` value.
    signing: str = Signing.HTTP_SIGNATURES.value
    #: The ``webhook-id`` of every attempt (webhooks), or ``""``.
    webhook_id: str = ""

"""A claim's messages, read by one written-out statement, are what the ORM reads."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_outbox.models import Message, Signing
from django_outbox.store.claim_rows import load_messages
from django_outbox.values.claimed import MessageData

pytestmark = pytest.mark.django_db

BODY = b'{"type": "Create", "content": "\\u00e9t\\u00e9 \\u2603"}\x00\xff'


def _message(**fields: object) -> Message:
    values: dict[str, object] = {
        "sender": "https://example.test/users/alice",
        "body": BODY,
        "body_sha256": hashlib.sha256(BODY).digest(),
        "activity_type": "Create",
        "max_attempts": 16,
        **fields,
    }
    return Message.objects.create(**values)


def _as_the_orm_reads(message: Message) -> MessageData:
    stored = Message.objects.get(pk=message.pk)
    return MessageData(
        stored.pk,
        stored.sender,
        bytes(stored.body),
        bytes(stored.body_sha256),
        stored.content_type,
        stored.deadline,
        stored.activity_type,
        stored.synchronize_collection,
        stored.max_attempts,
        stored.created_at,
        stored.signing,
        stored.webhook_id,
    )


def test_the_messages_read_are_those_the_orm_reads() -> None:
    plain = _message()
    webhook = _message(
        signing=Signing.STANDARD_WEBHOOKS,
        webhook_id="msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
        content_type="application/json",
        deadline=datetime(2031, 5, 17, 8, 30, 12, 345678, tzinfo=UTC),
        synchronize_collection=True,
        max_attempts=3,
        created_at=datetime(2030, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
    )
    _message()  # not asked for
    with CaptureQueriesContext(connection) as queries:
        read = load_messages([plain.pk, webhook.pk, plain.pk])
    assert len(queries) == 1
    assert read == {plain.pk: _as_the_orm_reads(plain), webhook.pk: _as_the_orm_reads(webhook)}
    for message in read.values():
        assert type(message.body) is bytes and type(message.synchronize_collection) is bool
        assert message.created_at is not None and message.created_at.tzinfo is not None
    assert read[webhook.pk].deadline == datetime(2031, 5, 17, 8, 30, 12, 345678, tzinfo=UTC)
    assert read[plain.pk].deadline is None


def test_no_ids_read_nothing() -> None:
    with CaptureQueriesContext(connection) as queries:
        assert load_messages([]) == {}
        assert load_messages([10**9]) == {}
    assert len(queries) == 1

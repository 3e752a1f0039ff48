"""A caller-given webhook_id is sent once per sender: a second send returns the stored
message and writes nothing, also when two sends race for the unique constraint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_outbox import outbox
from django_outbox.models import Delivery, Message
from django_outbox.sending import outbox as sending_outbox
from testproject.demo.webhooks import SECRET, SHOP

pytestmark = pytest.mark.django_db

PAYLOAD = {"type": "invoice.paid", "data": {"id": "in_1"}}
HOOKS = ["https://hooks.example/receive", "https://hooks.example/other"]


def test_a_second_send_with_the_id_returns_the_stored_message_and_writes_nothing(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    first = outbox.send_webhook(SHOP, PAYLOAD, HOOKS, webhook_id="order-42-paid")
    assert first is not None
    with (
        django_capture_on_commit_callbacks() as callbacks,
        CaptureQueriesContext(connection) as queries,
    ):
        again = outbox.send_webhook(
            SHOP, {"other": "payload"}, HOOKS[:1], webhook_id="order-42-paid"
        )
    assert again == first
    assert callbacks == []
    written = [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")]
    assert written == []
    assert (Message.objects.count(), Delivery.objects.count()) == (1, 2)


def every_sender_has_secrets(sender: str, endpoint: str) -> str:
    return SECRET


def test_the_id_is_unique_per_sender_not_across_senders(settings: Any) -> None:
    settings.OUTBOX_WEBHOOK_SECRET_RESOLVER = every_sender_has_secrets
    first = outbox.send_webhook(SHOP, PAYLOAD, HOOKS, webhook_id="evt_1")
    other = outbox.send_webhook("other-shop", PAYLOAD, HOOKS, webhook_id="evt_1")
    assert first is not None and other is not None and first != other
    fresh = [outbox.send_webhook(SHOP, PAYLOAD, HOOKS) for _ in range(2)]
    assert len({message.pk for message in fresh if message is not None}) == 2


def test_a_send_that_loses_the_race_returns_the_winner_and_keeps_the_callers_transaction(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    winner = outbox.send_webhook(SHOP, PAYLOAD, HOOKS, webhook_id="raced")
    found = sending_outbox._stored_webhook
    looks: list[str] = []

    def not_yet_committed(sender: str, webhook_id: str) -> Message | None:
        looks.append(webhook_id)
        return None if len(looks) == 1 else found(sender, webhook_id)

    with (
        transaction.atomic(),
        django_capture_on_commit_callbacks() as callbacks,
        mock.patch("django_outbox.sending.outbox._stored_webhook", not_yet_committed),
    ):
        loser = outbox.send_webhook(SHOP, PAYLOAD, HOOKS, webhook_id="raced")
        assert Message.objects.count() == 1  # the caller's transaction still works
    assert loser == winner and looks == ["raced", "raced"]
    assert callbacks == []
    assert Delivery.objects.count() == 2


def test_an_integrity_error_of_another_cause_is_raised() -> None:
    with (
        mock.patch("django_outbox.sending.outbox._stored_webhook", return_value=None),
        mock.patch.object(Message.objects, "create", side_effect=IntegrityError("other")),
        pytest.raises(IntegrityError, match="other"),
    ):
        outbox.send_webhook(SHOP, PAYLOAD, HOOKS, webhook_id="evt_2")
    assert not Message.objects.exists()


def test_the_database_refuses_a_second_row_with_the_id() -> None:
    message = outbox.send_webhook(SHOP, PAYLOAD, HOOKS, webhook_id="evt_3")
    assert message is not None
    copy = Message.objects.get(pk=message.pk)
    copy.pk = None
    with transaction.atomic(), pytest.raises(IntegrityError):
        copy.save()
    copy.webhook_id = ""
    copy.save()  # ActivityPub messages carry no webhook id: any number of them
    copy.pk = None
    copy.save()

"""django_outbox.testing with webhooks: captured, delivered in-process, checked."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from django_outbox import outbox
from django_outbox.signing.webhooks import WebhookSecret
from django_outbox.testing import (
    FakeInbox,
    InboxRequest,
    OutboxCapture,
    captured_sends,
    verify_webhook,
)
from testproject.demo.webhooks import OLD_SECRET, SECRET, SHOP, SIGNING_KEY

pytestmark = pytest.mark.django_db

PAYLOAD = {"type": "invoice.paid", "data": {"id": "in_1"}}
HOOK = "https://hooks.example/receive"


@pytest.fixture
def send_webhook(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> Iterator[Callable[..., OutboxCapture]]:
    """``send_webhook(endpoints, **options)``: a committed webhook of PAYLOAD, captured."""
    with captured_sends() as capture:

        def sending(endpoints: list[str], **options: Any) -> OutboxCapture:
            with django_capture_on_commit_callbacks(execute=True):
                outbox.send_webhook(SHOP, PAYLOAD, endpoints, **options)
            return capture

        yield sending


def test_a_webhook_is_captured_and_delivered_signed(
    send_webhook: Callable[..., OutboxCapture],
) -> None:
    sent = send_webhook([HOOK, "https://hooks.example/ed25519"])
    assert (sent[0].actor, sent[0].type, sent[0].activity) == (SHOP, "invoice.paid", PAYLOAD)
    assert sent[0].inboxes == [HOOK, "https://hooks.example/ed25519"]
    rows = sent.deliver_all()
    assert [row.state for row in rows] == ["delivered", "delivered"]
    hmac_request, ed_request = sent.inbox.requests
    assert hmac_request.headers["webhook-id"] == sent[0].message.webhook_id
    assert verify_webhook(hmac_request, SECRET)
    assert Webhook(SECRET).verify(hmac_request.body, dict(hmac_request.headers)) == PAYLOAD
    public = WebhookSecret(SIGNING_KEY).public_key
    assert public is not None
    assert verify_webhook(ed_request, public)
    assert verify_webhook(ed_request, SIGNING_KEY)


def test_verify_webhook_refuses_another_secret_body_id_or_time(
    send_webhook: Callable[..., OutboxCapture],
) -> None:
    sent = send_webhook([HOOK, "https://hooks.example/rotating"])
    sent.deliver_all()
    plain, rotating = sent.inbox.requests
    assert verify_webhook(rotating, SECRET) and verify_webhook(rotating, OLD_SECRET)
    assert not verify_webhook(plain, OLD_SECRET)
    assert not verify_webhook(plain, WebhookSecret(SIGNING_KEY).public_key or "")

    def changed(**headers: str) -> InboxRequest:
        return dataclasses.replace(plain, headers={**plain.headers, **headers})

    assert not verify_webhook(dataclasses.replace(plain, body=plain.body + b" "), SECRET)
    assert not verify_webhook(changed(**{"webhook-id": "msg_other"}), SECRET)
    stale = str(int(plain.headers["webhook-timestamp"]) - 301)
    assert not verify_webhook(changed(**{"webhook-timestamp": stale}), SECRET)
    assert not verify_webhook(changed(**{"webhook-signature": ""}), SECRET)


def test_a_retried_webhook_keeps_its_id(send_webhook: Callable[..., OutboxCapture]) -> None:
    inbox = FakeInbox(500, 200)
    [row] = send_webhook([HOOK]).deliver_all(inbox, retry_now=True)
    assert (row.state, row.attempts) == ("delivered", 2)
    first, second = inbox.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert verify_webhook(first, SECRET) and verify_webhook(second, SECRET)

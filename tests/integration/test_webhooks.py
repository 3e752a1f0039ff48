"""End to end: webhooks and recipients through a real Celery worker, Redis and loopback servers.

Every webhook signature is checked with the specification's reference library
(``standardwebhooks``) as a receiving view would call it, Ed25519 ones with
``cryptography``.
"""

from __future__ import annotations

import pytest

from django_outbox import Recipient, outbox
from django_outbox.models import DeliveryState, Signing
from django_outbox.signing.webhooks import WebhookSecret
from testproject.demo.keys import ACTOR, resolve
from testproject.demo.models import SignalLog
from testproject.demo.webhooks import OLD_SECRET, SECRET, SHOP, SIGNING_KEY
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.verifiers import verify_cavage
from tests.support.waiting import settled, wait_for
from tests.support.webhook_verifiers import verify_v1, verify_v1a
from tests.support.workers import Worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PAYLOAD = {"type": "invoice.paid", "timestamp": "2026-12-02T20:00:00Z", "data": {"id": "in_1"}}
LIVE = (DeliveryState.QUEUED, DeliveryState.SENDING, DeliveryState.WAITING)


def test_a_webhook_reaches_each_endpoint_with_one_id_and_verifiable_signatures(
    worker: Worker, inbox_server: InboxServer
) -> None:
    endpoints = [inbox_server.url("/hooks/one"), inbox_server.url("/hooks/ed25519")]
    message = outbox.send_webhook(SHOP, PAYLOAD, endpoints)
    assert message is not None
    assert [row.state for row in settled(2)] == ["delivered", "delivered"]
    (one,) = inbox_server.requests("/hooks/one")
    (ed,) = inbox_server.requests("/hooks/ed25519")
    assert one.body == ed.body == bytes(message.body)
    assert one.headers["webhook-id"] == ed.headers["webhook-id"] == message.webhook_id
    assert one.headers["Content-Type"] == "application/json"
    assert verify_v1(SECRET, one.body, one.headers) == PAYLOAD
    public = WebhookSecret(SIGNING_KEY).public_key
    assert public is not None and verify_v1a(public, ed.body, ed.headers)
    assert ed.headers["webhook-signature"].startswith("v1a,")
    assert one.headers["Signature"] is None  # no HTTP signature on a webhook


def test_during_a_rotation_either_secret_verifies(
    worker: Worker, inbox_server: InboxServer
) -> None:
    outbox.send_webhook(SHOP, PAYLOAD, [inbox_server.url("/hooks/rotating")])
    settled(1)
    (request,) = inbox_server.requests()
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    assert verify_v1(SECRET, request.body, request.headers) == PAYLOAD
    assert verify_v1(OLD_SECRET, request.body, request.headers) == PAYLOAD


def test_a_retried_webhook_keeps_its_id_and_gets_a_fresh_timestamp_and_signature(
    worker: Worker, inbox_server: InboxServer
) -> None:
    inbox_server.behave("/hook", Behaviour(statuses=(500, 200), headers={"Retry-After": "2"}))
    message = outbox.send_webhook(SHOP, PAYLOAD, [inbox_server.url("/hook")])
    assert message is not None
    (row,) = settled(1, timeout=30)
    assert (row.state, row.attempts, row.last_status) == ("delivered", 2, 200)
    first, second = inbox_server.requests()
    assert [first.status, second.status] == [500, 200]
    assert second.received_at - first.received_at >= 2  # Retry-After honoured
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == message.webhook_id
    stamps = [int(r.headers["webhook-timestamp"]) for r in (first, second)]
    assert stamps[1] - stamps[0] >= 2
    assert first.headers["webhook-signature"] != second.headers["webhook-signature"]
    verify_v1(SECRET, first.body, first.headers)
    verify_v1(SECRET, second.body, second.headers)
    signals = list(SignalLog.objects.order_by("id").values_list("signal", "outcome", "status"))
    assert signals == [
        ("attempted", "retry", 500),
        ("attempted", "delivered", 200),
        ("settled", "delivered", 200),
    ]
    assert set(SignalLog.objects.values_list("actor", flat=True)) == {SHOP}


def test_an_endpoint_that_answers_410_is_refused_and_reported(
    worker: Worker, inbox_server: InboxServer
) -> None:
    inbox_server.behave("/gone", Behaviour(statuses=(410,)))
    outbox.send_webhook(SHOP, PAYLOAD, [inbox_server.url("/gone")])
    (row,) = settled(1)
    assert (row.state, row.attempts, row.last_status) == ("refused", 1, 410)
    failed = wait_for(lambda: SignalLog.objects.filter(signal="failed").first())
    assert (failed.inbox, failed.status) == (inbox_server.url("/gone"), 410)
    assert len(inbox_server.requests()) == 1


def test_recipients_on_one_server_get_one_delivery_through_its_shared_inbox(
    worker: Worker, inbox_server: InboxServer
) -> None:
    shared = inbox_server.url("/inbox")
    recipients = [
        Recipient(inbox_server.url(f"/users/{name}/inbox"), shared) for name in ("a", "b", "c")
    ]
    recipients += [
        Recipient(inbox_server.url("/users/solo/inbox")),
        Recipient("https://demo.example/users/bob/inbox", "https://demo.example/inbox"),
    ]
    message = outbox.send(ACTOR, {"type": "Create", "id": "n"}, recipients)
    assert message is not None and message.signing == Signing.HTTP_SIGNATURES
    assert [row.state for row in settled(2)] == ["delivered", "delivered"]
    received = inbox_server.requests()
    assert sorted(r.path for r in received) == ["/inbox", "/users/solo/inbox"]
    key = resolve(ACTOR)
    assert key is not None and all(verify_cavage(r, key.private_key_pem) for r in received)

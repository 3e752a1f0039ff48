"""outbox.send_webhook: every check before writing, then rows as outbox.send writes them."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import override_settings

from django_outbox import Batch, WebhookKeys, outbox
from django_outbox.exceptions import (
    BlockedEndpoint,
    BodyTooLarge,
    InvalidActivity,
    InvalidBatch,
    InvalidInbox,
    InvalidSend,
    OutboxConfigurationError,
    SenderTooLong,
    UnknownEndpoint,
    UnknownSender,
)
from django_outbox.models import Delivery, Lane, Message, Signing
from django_outbox.sending.fanout import expand
from django_outbox.sending.webhook_endpoints import check_endpoint
from django_outbox.signing.webhooks import InvalidWebhookMessage, InvalidWebhookSecret
from testproject.demo.webhooks import SECRET, SHOP

pytestmark = pytest.mark.django_db

PAYLOAD = {"type": "invoice.paid", "timestamp": "2026-12-02T20:00:00Z", "data": {"id": "in_1"}}
HOOK = "https://hooks.example/receive"
GOOD = "whsec_" + base64.b64encode(b"g" * 32).decode()
PUBLIC_ONLY = {"OUTBOX_ALLOWED_NETWORKS": []}


def resolver(sender: str, endpoint: str) -> object:
    """Secrets by the endpoint's last path segment, some of them unusable."""
    return {
        "unknown": None,
        "not-base64": "whsec_not base64!",
        "too-short": "whsec_" + base64.b64encode(b"s" * 8).decode(),
        "public-key": "whpk_" + base64.b64encode(b"p" * 32).decode(),
        "number": 42,
        "two": [GOOD, SECRET],
        "keys": WebhookKeys(GOOD),
    }.get(endpoint.rsplit("/", 1)[-1], GOOD)


def nothing_written() -> bool:
    return not Message.objects.exists() and not Delivery.objects.exists()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"payload": ["not", "an", "object"]}, InvalidActivity),
        ({"payload": {"type": "x", "who": object()}}, InvalidActivity),
        ({"payload": {"type": "x", "tags": {"a", "b"}}}, InvalidActivity),
        ({"payload": {"type": "x", "n": float("nan")}}, InvalidActivity),
        ({"payload": {"type": "x", "text": "\ud800"}}, InvalidActivity),
        ({"payload": {"type": "x", "blob": "x" * 2_000_000}}, BodyTooLarge),
        ({"endpoints": ["ftp://hooks.example/receive"]}, InvalidInbox),
        ({"endpoints": ["https://user:pw@hooks.example/receive"]}, InvalidInbox),
        ({"endpoints": ["/receive"]}, InvalidInbox),
        ({"endpoints": [42]}, InvalidInbox),
        ({"endpoints": HOOK}, InvalidInbox),
        ({"endpoints": ["http://127.0.0.1:8000/hook"]}, BlockedEndpoint),
        ({"endpoints": ["http://localhost/hook"]}, BlockedEndpoint),
        ({"endpoints": ["http://api.localhost/hook"]}, BlockedEndpoint),
        # Refused before their address is judged: the parser takes no trailing dot and
        # no IPv4 address but a dotted quad (resolvers read those forms differently).
        ({"endpoints": ["http://api.localhost./hook"]}, InvalidInbox),
        ({"endpoints": ["http://[::1]/hook"]}, BlockedEndpoint),
        ({"endpoints": ["http://[::ffff:10.0.0.1]/hook"]}, BlockedEndpoint),
        ({"endpoints": ["http://10.1.2.3/hook"]}, BlockedEndpoint),
        ({"endpoints": ["http://169.254.169.254/latest/meta-data"]}, BlockedEndpoint),
        ({"endpoints": ["http://2130706433/hook"]}, InvalidInbox),
        ({"endpoints": ["http://0x7f.1/hook"]}, InvalidInbox),
        ({"endpoints": [HOOK, "http://0.0.0.0/hook"]}, BlockedEndpoint),
        ({"endpoints": ["https://hooks.example/unknown"]}, UnknownEndpoint),
        ({"endpoints": ["https://hooks.example/not-base64"]}, InvalidWebhookSecret),
        ({"endpoints": ["https://hooks.example/too-short"]}, InvalidWebhookSecret),
        ({"endpoints": ["https://hooks.example/public-key"]}, InvalidWebhookSecret),
        ({"endpoints": ["https://hooks.example/number"]}, InvalidWebhookSecret),
        ({"sender": ""}, UnknownSender),
        ({"sender": None}, UnknownSender),
        ({"sender": object()}, UnknownSender),
        ({"sender": "s" * 2049}, SenderTooLong),
        ({"webhook_id": "msg.1"}, InvalidWebhookMessage),
        ({"webhook_id": ""}, InvalidWebhookMessage),
        ({"webhook_id": "m" * 256}, InvalidWebhookMessage),
        ({"webhook_id": 42}, InvalidWebhookMessage),
        ({"content_type": "application/json\r\nX-Injected: 1"}, InvalidWebhookMessage),
        ({"batch": Batch(synchronize_collection=True)}, InvalidBatch),
    ],
)
def test_bad_input_raises_a_typed_error_and_writes_nothing(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    call: dict[str, Any] = {"sender": SHOP, "payload": PAYLOAD, "endpoints": [HOOK], **kwargs}
    sender, payload, endpoints = call.pop("sender"), call.pop("payload"), call.pop("endpoints")
    with (
        override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=resolver, **PUBLIC_ONLY),
        pytest.raises(error) as raised,
    ):
        outbox.send_webhook(sender, payload, endpoints, **call)
    assert isinstance(raised.value, InvalidSend)
    assert isinstance(raised.value, ValueError)
    assert nothing_written()


def test_an_error_names_the_endpoint_not_an_inbox_and_never_the_secret() -> None:
    with (
        override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=resolver),
        pytest.raises(InvalidInbox) as bad,
    ):
        outbox.send_webhook(SHOP, PAYLOAD, ["ftp://hooks.example/x"])
    assert str(bad.value).startswith("endpoint 'ftp://hooks.example/x'")
    with (
        override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=resolver),
        pytest.raises(InvalidWebhookSecret) as secret,
    ):
        outbox.send_webhook(SHOP, PAYLOAD, ["https://hooks.example/not-base64"])
    assert "not base64" not in str(secret.value)


def test_without_a_secret_resolver_send_webhook_is_a_configuration_error() -> None:
    with override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=None):
        with pytest.raises(OutboxConfigurationError, match="OUTBOX_WEBHOOK_SECRET_RESOLVER"):
            outbox.send_webhook(SHOP, PAYLOAD, [HOOK])
        with pytest.raises(OutboxConfigurationError):
            outbox.send_webhook(SHOP, PAYLOAD, [])  # even with nothing to send
    assert nothing_written()


def test_the_resolver_is_asked_for_each_endpoint_once() -> None:
    asked: list[tuple[str, str]] = []

    def recording(sender: str, endpoint: str) -> str:
        asked.append((sender, endpoint))
        return GOOD

    endpoints = [HOOK, "https://other.example/in", HOOK]
    with override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=recording):
        outbox.send_webhook(SHOP, PAYLOAD, endpoints)
    assert asked == [(SHOP, HOOK), (SHOP, "https://other.example/in")]


def test_a_webhook_is_stored_once_with_one_id_for_every_endpoint(
    django_capture_on_commit_callbacks: Any,
) -> None:
    endpoints = [HOOK, "https://b.example/hooks/two", HOOK, "https://c.example/hooks/keys"]
    with (
        override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=resolver, OUTBOX_KEY_RESOLVER=None),
        django_capture_on_commit_callbacks() as callbacks,
    ):
        message = outbox.send_webhook(SHOP, PAYLOAD, endpoints, batch=Batch(tag="invoices"))
    assert message is not None
    assert message.signing == Signing.STANDARD_WEBHOOKS
    assert message.webhook_id.startswith("msg_") and len(message.webhook_id) == 28
    assert (message.sender, message.content_type) == (SHOP, "application/json")
    assert (message.activity_type, message.tag, message.lane) == (
        "invoice.paid",
        "invoices",
        Lane.PRIORITY,
    )
    assert json.loads(bytes(message.body)) == PAYLOAD
    assert list(Delivery.objects.order_by("id").values_list("inbox", flat=True)) == [
        HOOK,
        "https://b.example/hooks/two",
        "https://c.example/hooks/keys",
    ]
    assert len(callbacks) == 2  # publishing, and counting its fan-out
    assert str(message) == f"invoice.paid #{message.pk} from {SHOP}"


def test_the_application_may_give_the_id_and_each_send_gets_its_own_otherwise() -> None:
    first = outbox.send_webhook(SHOP, PAYLOAD, [HOOK], webhook_id="evt_2Zk3-x_9")
    second = outbox.send_webhook(SHOP, PAYLOAD, [HOOK])
    third = outbox.send_webhook(SHOP, PAYLOAD, [HOOK])
    assert first is not None and second is not None and third is not None
    assert first.webhook_id == "evt_2Zk3-x_9"
    assert second.webhook_id != third.webhook_id


def test_the_payload_is_serialised_as_django_serialises_json_by_default() -> None:
    when = datetime(2026, 12, 2, 20, 0, tzinfo=UTC)
    key = uuid.UUID("12345678-1234-5678-1234-567812345678")
    payload = {"type": "order.paid", "at": when, "amount": Decimal("9.90"), "id": key, "é": "ü"}
    message = outbox.send_webhook(SHOP, payload, [HOOK])
    assert message is not None
    assert (
        bytes(message.body)
        == (
            '{"type":"order.paid","at":"2026-12-02T20:00:00Z","amount":"9.90",'
            '"id":"12345678-1234-5678-1234-567812345678","é":"ü"}'
        ).encode()
    )
    with pytest.raises(InvalidActivity, match="webhook payload"):
        outbox.send_webhook(SHOP, payload, [HOOK], encoder=json.JSONEncoder)


def test_no_endpoint_is_a_no_op() -> None:
    assert outbox.send_webhook(SHOP, PAYLOAD, []) is None
    assert nothing_written()


def test_webhooks_ride_the_lanes_and_large_fan_outs_are_expanded_by_a_worker() -> None:
    endpoints = [f"https://h{i}.example/hook" for i in range(8)]
    with override_settings(OUTBOX_INLINE_FANOUT=5):
        message = outbox.send_webhook(SHOP, PAYLOAD, endpoints, batch=Batch(max_attempts=3))
        assert message is not None and message.lane == Lane.DEFAULT
        assert Delivery.objects.count() == 0
        assert expand(message.pk) == 8
    assert set(Delivery.objects.values_list("inbox", flat=True)) == set(endpoints)


def test_loopback_endpoints_are_allowed_where_the_operator_allows_them() -> None:
    with override_settings(OUTBOX_ALLOWED_NETWORKS=["127.0.0.0/8", "::1/128"]):
        message = outbox.send_webhook(
            SHOP, PAYLOAD, ["http://127.0.0.1:8000/hook", "http://localhost:9/x", "http://[::1]/"]
        )
    assert message is not None and message.inbox_count == 3


def test_check_endpoint_validates_a_url_a_user_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"internal.example": ["10.0.0.7"], "public.example": ["93.184.216.34"]}

    def fake_getaddrinfo(host: str, port: int) -> list[str]:
        if host not in answers:
            raise OSError("Name or service not known")
        return answers[host]

    monkeypatch.setattr("django_outbox.transport.addresses._getaddrinfo", fake_getaddrinfo)
    with override_settings(**PUBLIC_ONLY):
        check_endpoint("https://public.example/hook")
        check_endpoint("https://public.example/hook", resolve=True)
        check_endpoint("https://internal.example/hook")  # a name: judged when resolved
        with pytest.raises(BlockedEndpoint):
            check_endpoint("https://internal.example/hook", resolve=True)
        with pytest.raises(InvalidInbox, match="cannot resolve"):
            check_endpoint("https://nowhere.example/hook", resolve=True)
        with pytest.raises(InvalidInbox, match="dotted-quad"):
            check_endpoint("http://127.1/hook")
        with pytest.raises(InvalidInbox, match="credentials"):
            check_endpoint("https://me:pw@public.example/hook")

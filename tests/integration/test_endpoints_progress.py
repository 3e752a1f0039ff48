"""With a real worker: a failing webhook endpoint disabled, skipped and enabled again;
a webhook id sent once; a message's progress before and after its fan-out expands."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import transaction
from django.test import override_settings

from django_outbox import Batch, Progress, outbox
from django_outbox.models import Delivery, Endpoint, Message
from testproject.demo.keys import ACTOR
from testproject.demo.models import SignalLog
from testproject.demo.webhooks import SHOP
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PAYLOAD = {"type": "invoice.paid", "data": {"id": "in_1"}}


def test_a_failing_endpoint_is_disabled_skipped_and_enabled_again(
    make_worker: Callable[..., Worker], inbox_server: InboxServer
) -> None:
    make_worker(OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS=1)
    hook = inbox_server.url("/hooks/failing")
    inbox_server.behave("/hooks/failing", Behaviour(statuses=(503,)))
    first = outbox.send_webhook(SHOP, PAYLOAD, [hook], batch=Batch(max_attempts=1))
    disabled = wait_for(lambda: Endpoint.objects.filter(disabled_since__isnull=False).first())
    assert (disabled.url, disabled.failure_days, disabled.last_status) == (hook, 1, 503)
    signal = wait_for(lambda: SignalLog.objects.filter(signal="endpoint_disabled").first())
    assert (signal.inbox, signal.status) == (hook, 503)
    assert outbox.progress(first) == Progress(failed=1)

    second = outbox.send_webhook(SHOP, PAYLOAD, [hook])
    skipped = wait_for(lambda: Delivery.objects.filter(message=second, state="skipped").first())
    assert "is disabled" in skipped.last_error and skipped.attempts == 0
    failed = wait_for(lambda: SignalLog.objects.filter(signal="failed", inbox=hook).last())
    assert failed.delivery_id == skipped.pk and failed.error == skipped.last_error
    assert outbox.progress(second) == Progress(skipped=1)
    assert len(inbox_server.requests("/hooks/failing")) == 1

    inbox_server.behave("/hooks/failing", Behaviour(statuses=(200,)))
    assert outbox.enable_endpoint(hook) is True
    third = outbox.send_webhook(SHOP, PAYLOAD, [hook])
    wait_for(lambda: outbox.progress(third) == Progress(delivered=1))
    assert len(inbox_server.requests("/hooks/failing")) == 2
    assert not Endpoint.objects.exists()


def test_a_webhook_id_sent_twice_is_delivered_once(
    worker: Worker, inbox_server: InboxServer
) -> None:
    hook = inbox_server.url("/hooks/once")
    first = outbox.send_webhook(SHOP, PAYLOAD, [hook], webhook_id="order-7-paid")
    again = outbox.send_webhook(SHOP, PAYLOAD, [hook], webhook_id="order-7-paid")
    assert again == first and Message.objects.count() == 1
    wait_for(lambda: outbox.progress(first) == Progress(delivered=1))
    (request,) = inbox_server.requests("/hooks/once")
    assert request.headers["webhook-id"] == "order-7-paid"


def test_progress_counts_a_fan_out_in_full_before_the_worker_expands_it(
    worker: Worker, inbox_server: InboxServer
) -> None:
    inboxes = [inbox_server.url(f"/users/u{i}/inbox") for i in range(30)]
    with override_settings(OUTBOX_INLINE_FANOUT=10), transaction.atomic():
        message = outbox.send(ACTOR, {"type": "Create", "id": "n"}, inboxes)
        assert not Delivery.objects.exists()
        assert outbox.progress(message) == Progress(pending=30)
    seen = wait_for(lambda: outbox.progress(message).done and outbox.progress(message), 90)
    assert seen == Progress(delivered=30)
    assert Delivery.objects.count() == 30

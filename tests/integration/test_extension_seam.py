"""Payments behind the extension seam: with ``OUTBOX_PAYMENTS`` unset, a real worker
delivers without importing any paid-push code."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from django_outbox import outbox
from django_outbox.models import Delivery, DeliveryState
from testproject.demo.keys import ACTOR
from testproject.inbox_servers import InboxServer
from testproject.loaded_modules import KEY
from tests.support.waiting import wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.broker]

NOTE = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Create", "id": "seam"}
#: Imported whether or not payments are on: the package's face (lazy), the tables'
#: declarations, which the app registers so that the migrations match either way, and
#: the signals' declarations, which the test project's receivers connect to (as an
#: application that logs payments does).
DECLARATIONS = {
    "django_outbox.payments",
    "django_outbox.payments.models",
    "django_outbox.payments.signals",
}


def test_a_delivery_with_payments_off_imports_no_paid_push_code(
    make_worker: Callable[..., Worker],
    redis_url: str,
    inbox_server: InboxServer,
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.delete(KEY)
    make_worker(OUTBOX_TEST_MODULES=redis_url, OUTBOX_PAYMENTS=None)
    outbox.send(ACTOR, NOTE, [inbox_server.url("/a"), inbox_server.url("/b")])
    wait_for(lambda: Delivery.objects.filter(state=DeliveryState.DELIVERED).count() == 2, 60)
    wait_for(lambda: client.scard(KEY) > 0, 10)
    loaded = {name.decode() for name in client.smembers(KEY)}
    assert {"django_outbox.worker.attempt", "django_outbox.extensions.registry"} <= loaded
    assert "django_outbox.admin" in loaded, "the admin, autodiscovered, is loaded too"
    paid_push = {name for name in loaded if name.startswith("django_outbox.payments")}
    assert paid_push == DECLARATIONS
    assert len(inbox_server.requests()) == 2

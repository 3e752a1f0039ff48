"""The admin pages render, and their actions use the package's own functions."""

from __future__ import annotations

from datetime import date

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_outbox import outbox
from django_outbox.breakers import BreakerPolicy, MemoryBreakerStore
from django_outbox.models import Delivery, DeliveryState, Host
from testproject.demo.keys import ACTOR

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(admin_client: Client) -> Client:
    return admin_client


def failed_delivery() -> Delivery:
    outbox.send(ACTOR, {"type": "Create"}, ["https://a.example/inbox", "https://b.example/inbox"])
    Delivery.objects.update(
        state=DeliveryState.FAILED, attempts=16, last_status=500, last_error="HTTP 500"
    )
    return Delivery.objects.first()  # type: ignore[return-value]


def test_pages_render(staff: Client) -> None:
    failed_delivery()
    Host.objects.create(name="dead.example", last_failure_day=date.today())
    for name in ("delivery", "message", "host"):
        page = staff.get(reverse(f"admin:django_outbox_{name}_changelist"))
        assert page.status_code == 200
    delivery = Delivery.objects.first()
    assert (
        staff.get(reverse("admin:django_outbox_delivery_change", args=[delivery.pk])).status_code
        == 200
    )
    page = staff.get(reverse("admin:django_outbox_delivery_changelist") + "?state=failed")
    assert b"HTTP 500" in page.content
    assert staff.get(reverse("admin:django_outbox_delivery_add")).status_code == 403


def test_requeue_action_queues_again_with_a_fresh_budget(
    staff: Client,
    django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
) -> None:
    failed_delivery()
    ids = list(Delivery.objects.values_list("pk", flat=True))
    with django_capture_on_commit_callbacks() as callbacks:
        staff.post(
            reverse("admin:django_outbox_delivery_changelist"),
            {"action": "requeue", "_selected_action": ids},
        )
    assert set(Delivery.objects.values_list("state", "attempts")) == {("queued", 0)}
    assert len(callbacks) == 1


def test_give_up_action_fails_live_deliveries(staff: Client) -> None:
    outbox.send(ACTOR, {"type": "Create"}, ["https://a.example/inbox"])
    ids = list(Delivery.objects.values_list("pk", flat=True))
    staff.post(
        reverse("admin:django_outbox_delivery_changelist"),
        {"action": "give_up", "_selected_action": ids},
    )
    row = Delivery.objects.get()
    assert row.state == DeliveryState.FAILED
    assert "given up by" in row.last_error


def test_hosts_can_be_marked_available(staff: Client) -> None:
    host = Host.objects.create(
        name="dead.example", last_failure_day=date.today(), unavailable_since=timezone.now()
    )
    staff.post(
        reverse("admin:django_outbox_host_changelist"),
        {"action": "mark_available", "_selected_action": [host.pk]},
    )
    assert not Host.objects.exists()


def test_open_breakers_are_listed_and_reset(staff: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # The store the settings ask for is made anew on each call: share one memory store.
    store = MemoryBreakerStore()
    monkeypatch.setattr("django_outbox.admin.configured_store", lambda: store)
    policy = BreakerPolicy(threshold=1, cool_off=60)
    store.record("host:dead.example", policy, failed=True, admission=None)
    store.record("host:other.example", policy, failed=True, admission=None)
    url = reverse("admin:django_outbox_breakers")
    page = staff.get(url).content
    assert b"host:dead.example" in page and b"host:other.example" in page
    staff.post(url, {"key": "host:dead.example"})
    assert store.admit("host:dead.example", policy).kind == "pass"
    assert [state.key for state in store.states()] == ["host:other.example"]
    staff.post(url, {"key": "host:other.example"})
    assert b"No breaker is open" in staff.get(url).content

"""Webhook endpoints failing on distinct days are disabled; their deliveries are skipped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.core.checks import run_checks
from django.test import override_settings
from django.utils import timezone

from django_outbox import Batch, outbox
from django_outbox.exceptions import InvalidInbox
from django_outbox.models import Endpoint, Host
from django_outbox.signals import delivery_failed, delivery_settled, endpoint_disabled
from django_outbox.testing import FakeInbox, captured_sends
from django_outbox.testing.inbox import Answer, InboxRequest
from django_outbox.transport import ConnectFailed, TimedOut
from testproject.demo.webhooks import SHOP
from tests.support.admin_pages import said, staff_client
from tests.support.receivers import receiving

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example/receive"
OTHER = "https://other.example/receive"
PAYLOAD = {"type": "invoice.paid", "data": {"id": "in_1"}}
START = date(2026, 3, 1)
Handler = Callable[[InboxRequest], Answer]


@pytest.fixture(autouse=True)
def _fresh_lists(settings: Any) -> None:
    """Every read of the disabled endpoints goes to the database."""
    settings.OUTBOX_HOSTS_REFRESH = 0


@pytest.fixture
def deliver(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> Iterator[Callable[..., list[Any]]]:
    """``deliver(day, handler, endpoints)``: send one webhook (one attempt) and deliver it
    with the failure days' clock on ``day``; its rows."""
    with captured_sends() as capture:

        def sending(day: date, handler: Handler, endpoints: tuple[str, ...] = (HOOK,)) -> list[Any]:
            moment = datetime(day.year, day.month, day.day, 12, tzinfo=UTC)
            with mock.patch(
                "django_outbox.destinations.failure_days.timezone.now", return_value=moment
            ):
                with django_capture_on_commit_callbacks(execute=True):
                    outbox.send_webhook(SHOP, PAYLOAD, list(endpoints), batch=Batch(max_attempts=1))
                with django_capture_on_commit_callbacks(execute=True):
                    rows = capture[-1].deliver(handler)
            return rows

        yield sending


def refuse_connection(request: InboxRequest) -> Answer:
    raise ConnectFailed("connection refused")


def time_out(request: InboxRequest) -> Answer:
    raise TimedOut("no answer in 10 s")


@pytest.mark.parametrize("handler", [FakeInbox(503), refuse_connection, time_out])
def test_an_endpoint_failing_on_five_distinct_days_is_disabled_with_a_signal(
    deliver: Callable[..., list[Any]], handler: Handler
) -> None:
    with receiving(endpoint_disabled) as disabled:
        for offset in range(4):
            deliver(START + timedelta(days=offset), handler)
            deliver(START + timedelta(days=offset), handler)  # the same day counts once
        row = Endpoint.objects.get()
        assert (row.url, row.failure_days, row.disabled_since) == (HOOK, 4, None)
        assert disabled == []
        deliver(START + timedelta(days=4), handler)
    row.refresh_from_db()
    assert row.failure_days == 5 and row.disabled_since is not None
    assert row.disabled_since.date() == START + timedelta(days=4)
    [signal] = disabled
    assert signal["endpoint"] == HOOK and signal["since"] == row.disabled_since
    assert signal["failure_days"] == 5
    assert (signal["status"], signal["error"]) == (row.last_status, row.last_error)
    assert signal["status"] == (503 if isinstance(handler, FakeInbox) else None)


def raise_internally(sender: str, endpoint: str) -> Any:
    raise RuntimeError("our own bug")


@pytest.mark.parametrize("answer", [429, (429, {"Retry-After": "5"}), 404, 400])
def test_429s_and_answers_do_not_count(deliver: Callable[..., list[Any]], answer: Answer) -> None:
    with override_settings(OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS=1):
        for offset in range(8):
            deliver(START + timedelta(days=offset), FakeInbox(answer))
    assert not Endpoint.objects.exists()


def test_internal_errors_do_not_count(deliver: Callable[..., list[Any]]) -> None:
    with (
        override_settings(OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS=1),
        mock.patch("django_outbox.worker.preparing.resolve_webhook_keys", raise_internally),
    ):
        [row] = deliver(START, FakeInbox(503))
    assert "internal: preparing the delivery" in row.last_error
    assert not Endpoint.objects.exists()


def test_failure_days_count_per_endpoint_url(deliver: Callable[..., list[Any]]) -> None:
    def by_url(request: InboxRequest) -> Answer:
        return 503 if request.url == HOOK else 200

    same_host = "https://hooks.example/other"
    deliver(START, by_url, (HOOK, same_host))
    assert list(Endpoint.objects.values_list("url", flat=True)) == [HOOK]
    assert not Host.objects.exists()  # the host answered: to its own rule, a success


def test_a_success_forgets_the_failure_days(deliver: Callable[..., list[Any]]) -> None:
    deliver(START, FakeInbox(503))
    deliver(START + timedelta(days=1), FakeInbox(503))
    assert Endpoint.objects.get().failure_days == 2
    deliver(START + timedelta(days=2), FakeInbox(200))
    assert not Endpoint.objects.exists()


def test_zero_days_never_disables(deliver: Callable[..., list[Any]]) -> None:
    with override_settings(OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS=0, OUTBOX_UNAVAILABLE_AFTER_DAYS=99):
        for offset in range(10):
            deliver(START + timedelta(days=offset), FakeInbox(503))
    row = Endpoint.objects.get()
    assert (row.failure_days, row.disabled_since) == (10, None)


def disable(url: str = HOOK) -> None:
    Endpoint.objects.create(
        url=url, failure_days=5, last_failure_day=START, disabled_since=timezone.now()
    )


def test_new_deliveries_to_a_disabled_endpoint_are_skipped_with_delivery_failed(
    deliver: Callable[..., list[Any]],
) -> None:
    disable()
    inbox = FakeInbox(200)
    with receiving(delivery_failed) as failed, receiving(delivery_settled) as settled:
        rows = deliver(START, inbox, (HOOK, OTHER))
    assert {row.inbox: row.state for row in rows} == {HOOK: "skipped", OTHER: "delivered"}
    assert inbox.urls == [OTHER]
    [skipped] = [row for row in rows if row.inbox == HOOK]
    assert "is disabled" in skipped.last_error and skipped.attempts == 0
    [signal] = failed
    assert (signal["inbox"], signal["status"], signal["deadline"]) == (HOOK, None, False)
    assert signal["error"] == skipped.last_error and signal["actor"] == SHOP
    assert {(s["inbox"], s["outcome"]) for s in settled} == {
        (HOOK, "skipped"),
        (OTHER, "delivered"),
    }


def test_enable_endpoint_sends_to_it_again(deliver: Callable[..., list[Any]]) -> None:
    disable()
    assert outbox.enable_endpoint("HTTPS://Hooks.Example:443/receive") is True
    assert not Endpoint.objects.exists()
    [row] = deliver(START, FakeInbox(200))
    assert row.state == "delivered"
    assert outbox.enable_endpoint(HOOK) is False


def test_enable_endpoint_refuses_a_bad_url_and_changes_nothing() -> None:
    disable()
    for bad in ["not a url", "ftp://hooks.example/", "http://127.0.0.1/hook"]:
        with override_settings(OUTBOX_ALLOWED_NETWORKS=[]), pytest.raises(InvalidInbox):
            outbox.enable_endpoint(bad)
    assert Endpoint.objects.get().disabled_since is not None


def test_the_admin_action_enables_the_selected_endpoints() -> None:
    disable()
    disable(OTHER)
    client = staff_client("view_endpoint", "change_endpoint")
    listing = client.get("/admin/django_outbox/endpoint/")
    assert listing.status_code == 200 and HOOK in listing.content.decode()
    selected = Endpoint.objects.get(url=HOOK).pk
    response = client.post(
        "/admin/django_outbox/endpoint/",
        {"action": "enable", "index": "0", "_selected_action": [selected]},
        follow=True,
    )
    level, text = said(response)
    assert level == "success" and text.startswith(f"Enabled {HOOK} (it was disabled): ")
    assert list(Endpoint.objects.values_list("url", flat=True)) == [OTHER]


def test_the_admin_action_needs_the_change_permission() -> None:
    disable()
    client = staff_client("view_endpoint")
    response = client.post(
        "/admin/django_outbox/endpoint/",
        {"action": "enable", "index": "0", "_selected_action": [Endpoint.objects.get().pk]},
    )
    assert response.status_code in (200, 302, 403)
    assert Endpoint.objects.get().disabled_since is not None


@pytest.mark.parametrize("value", [-1, 1.5, "5", 40000])
def test_a_bad_disable_after_days_is_check_e019(value: object) -> None:
    with override_settings(OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS=value):
        ids = [message.id for message in run_checks()]
    assert "django_outbox.E019" in ids

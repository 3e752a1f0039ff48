"""Issue 24 in a real browser: a webhook endpoint disabled after its failure days.

Its state is made by the worker's own code (``captured_sends`` delivers in-process,
the failure days' clock set on five past days), then an operator finds it in the
admin, sees why and since when it is disabled (in the list, on its page, and in
the reason of a delivery skipped because of it), enables it with its page's button
(and another one with the list's action), and a new webhook to each is delivered.
Headless Chromium as in ``test_browser.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from django_outbox import Batch, outbox
from django_outbox.admin.formatting import local_time
from django_outbox.models import Delivery, Endpoint
from django_outbox.testing import FakeInbox, captured_sends
from django_outbox.testing.inbox import Answer
from testproject.demo.webhooks import SHOP
from tests.support.browser import Browser, chromium

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HOOK = "https://hooks.example/receive"
OTHER = "https://other.example/receive"
PAYLOAD = {"type": "invoice.paid", "data": {"id": "in_1"}}


@pytest.fixture
def operator(live_server: Any, admin_user: Any, settings: Any) -> Iterator[Browser]:
    """A browser logged in as the admin (as ``test_browser.py``'s ``operator``);
    every read of the disabled endpoints goes to the database."""
    settings.OUTBOX_HOSTS_REFRESH = 0
    with chromium(live_server.url) as browser:
        browser.log_in("admin", "password")
        yield browser


def webhook(answer: Answer, day: datetime | None = None) -> list[Delivery]:
    """Send a webhook to both endpoints and deliver it at once, as a worker would,
    answered with ``answer``, the clock set to ``day`` if given; its rows."""
    now = "django_outbox.destinations.failure_days.timezone.now"
    with captured_sends() as capture, mock.patch(now, return_value=day) if day else nullcontext():
        outbox.send_webhook(SHOP, PAYLOAD, [HOOK, OTHER], batch=Batch(max_attempts=1))
        return capture[-1].deliver(FakeInbox(answer))


def test_a_disabled_endpoint_is_shown_with_why_and_since_and_enabled_again(
    operator: Browser,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    today = timezone.now().astimezone(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    for back in range(5, 0, -1):  # five failure days, the last one yesterday
        assert {row.state for row in webhook(503, today - timedelta(days=back))} == {"failed"}
    hook, other = Endpoint.objects.order_by("url")
    assert (hook.url, hook.failure_days, other.url) == (HOOK, 5, OTHER)
    assert hook.disabled_since is not None and other.disabled_since is not None
    skipped = {row.inbox: row for row in webhook(202)}
    assert {row.state for row in skipped.values()} == {"skipped"}
    since = local_time(hook.disabled_since)

    # The list: disabled since yesterday, with the latest failure.
    operator.get("/admin/django_outbox/")
    operator.find("a[href$='/django_outbox/endpoint/']").click()
    operator.wait_for("#result_list")
    rows = {row.find_element(By.CSS_SELECTOR, "th").text: row.text for row in _rows(operator)}
    assert set(rows) == {HOOK, OTHER}
    assert since in rows[HOOK] and "503" in rows[HOOK] and hook.last_error in rows[HOOK]

    # Its page says it is disabled, since when, why, and what that means.
    operator.driver.find_element(By.LINK_TEXT, HOOK).click()
    operator.wait_for(".field-state")
    state = operator.text(".field-state .readonly")
    assert state.startswith(f"disabled since {since}")
    assert state.endswith("its deliveries are skipped until it is enabled")
    assert operator.text(".field-last_error .readonly") == hook.last_error
    assert operator.text(".field-last_status .readonly") == "503"

    # Where an operator looks next: the delivery skipped because of it says why.
    operator.find("#outbox-endpoint-skipped").click()
    operator.wait_for("#result_list")
    [row] = _rows(operator)
    reason = f"skipped: the webhook endpoint {HOOK} is disabled (see outbox.enable_endpoint)"
    error = row.find_element(By.CSS_SELECTOR, "td.field-error_cell .outbox-clip")
    assert error.get_attribute("title") == reason
    row.find_element(By.CSS_SELECTOR, "th a").click()
    operator.wait_for(".field-last_error")
    assert operator.text(".field-state .readonly") == "skipped"
    assert operator.text(".field-last_error .readonly") == reason
    assert skipped[HOOK].last_error == reason

    # The Enable button: said, logged, and the list holds only the other one now.
    operator.get(f"/admin/django_outbox/endpoint/{hook.pk}/change/")
    operator.find("#outbox-endpoint-enable input[type=submit]").click()
    operator.wait_for("ul.messagelist")
    ((level, text),) = operator.messages()
    assert level == "success"
    assert text.startswith(f"Enabled {HOOK} (it was disabled): failure days forgotten")
    assert "skipped while disabled stay skipped: requeue them" in text
    assert [row.find_element(By.CSS_SELECTOR, "th").text for row in _rows(operator)] == [OTHER]
    assert list(Endpoint.objects.values_list("url", flat=True)) == [OTHER]

    # The list's action, on the endpoints filtered as disabled.
    operator.find("#changelist-filter a[href*='disabled_since__isempty=0']").click()
    operator.wait_for("#result_list")
    operator.find("#action-toggle").click()
    Select(operator.find("select[name=action]")).select_by_value("enable")
    operator.find("button[name=index]").click()
    operator.wait_for("ul.messagelist")
    ((level, text),) = operator.messages()
    assert level == "success" and text.startswith(f"Enabled {OTHER} (it was disabled)")
    assert _rows(operator) == []  # no endpoint is failing any more
    assert not Endpoint.objects.exists()
    assert {entry.object_repr for entry in LogEntry.objects.all()} == {
        f"enable {HOOK}",
        f"enable {OTHER}",
    }

    # A new webhook is no longer skipped: both endpoints get it.
    delivered = webhook(202)
    assert {row.inbox: row.state for row in delivered} == {HOOK: "delivered", OTHER: "delivered"}
    assert Delivery.objects.filter(state="skipped").count() == 2  # those stay skipped


def _rows(browser: Browser) -> list[Any]:
    """The rows of the change list on the page."""
    return browser.find_all("#result_list tbody tr")

"""The admin console in a real browser: headless Chromium, driven by Selenium.

Each of issue 23's bugs, the confirmation flow, the permission rules, the overview's
auto-refresh and the layout at 1400 px (no horizontal scroll), on the sample outbox
of ``sample_outbox.py`` (real Redis for breakers and metrics, the live server's
database).  ``scripts/screenshots`` runs the layout test to make ``docs/img/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db.models.functions import Now
from django.utils import timezone

from django_outbox.breakers import BreakerPolicy
from django_outbox.breakers.configured import configured_store
from django_outbox.models import Attempt, Delivery, DeliveryState, Heartbeat, Host
from django_outbox.status.snapshot import failing_population
from tests.integration.sample_outbox import fill
from tests.support.browser import WIDTH, Browser, chromium

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

DEAD = "host:dead.example"


@pytest.fixture
def browser(live_server: Any) -> Iterator[Browser]:
    with chromium(live_server.url) as opened:
        yield opened


@pytest.fixture
def sample() -> dict[str, int]:
    return fill()


@pytest.fixture
def operator(browser: Browser, admin_user: Any) -> Browser:
    browser.log_in("admin", "password")
    return browser


def test_the_overview_counts_failed_attempts_and_hosts_as_its_tables_do(
    operator: Browser, sample: dict[str, int]
) -> None:
    from selenium.webdriver.common.by import By

    operator.get("/admin/django_outbox/")
    operator.driver.find_element(By.LINK_TEXT, "Overview").click()
    operator.wait_for("#outbox-cards")
    assert operator.text("h1") == "Outbox overview"
    assert operator.text("#queued") == f"{sample['queued']:,}"
    assert operator.text("#open-breakers") == "1"
    hosts = failing_population(timezone.now())
    assert operator.text("#failing-hosts") == str(hosts)
    assert f"Most failing hosts ({min(hosts, 10)} of {hosts})" in operator.text("#failing")
    # Bug 2: flaky.example's late successes are not failed attempts.
    retries = Attempt.objects.filter(host="flaky.example", result="retry").count()
    assert Attempt.objects.filter(host="flaky.example", result="delivered").exists()
    row = next(r for r in operator.find_all("#failing tbody tr, #failing tr") if "flaky" in r.text)
    assert row.find_elements(By.CSS_SELECTOR, "td")[1].text == str(retries)
    failed = Attempt.objects.filter(result="retry").count()
    assert f"failed attempts ({failed:,})" in operator.text("#chart-hour")
    assert len(operator.find_all("#chart-day svg rect")) > 24
    assert "post-1042" in operator.text("#batches")
    # No worker beats in the sample: an alert says so, above everything else.
    assert "No worker process is beating" in operator.text("#outbox-no-workers")
    assert "due deliveries wait" in operator.text("#outbox-no-workers")


@pytest.mark.parametrize("width", [WIDTH, 1920])
def test_the_app_index_shows_operations_on_one_line(
    operator: Browser, sample: dict[str, int], width: int
) -> None:
    operator.driver.set_window_size(width, 1000)
    operator.get("/admin/django_outbox/")
    operator.wait_for("#outbox-overview-link")
    for text in ("Overview", "Open circuit breakers"):
        link = operator.find(f"#outbox-overview-link a[href$='/{_slug(text)}/']")
        assert link.text == text
        assert operator.js("return arguments[0].getClientRects().length", link) == 1, text
    assert operator.fits()


def _slug(text: str) -> str:
    return {"Overview": "overview", "Open circuit breakers": "breakers"}[text]


def test_staff_without_outbox_permissions_are_refused_and_see_no_links(
    browser: Browser, sample: dict[str, int]
) -> None:
    User.objects.create_user("clerk", password="clerk-password", is_staff=True)
    browser.log_in("clerk", "clerk-password")
    assert "/admin/django_outbox/" not in browser.driver.page_source
    failed = Delivery.objects.filter(state=DeliveryState.FAILED).first()
    assert failed is not None
    for path in (
        "/admin/django_outbox/delivery/overview/",
        "/admin/django_outbox/delivery/",
        f"/admin/django_outbox/delivery/{failed.pk}/change/",
        f"/admin/django_outbox/delivery/{failed.pk}/requeue/",
        "/admin/django_outbox/message/",
        "/admin/django_outbox/host/",
        "/admin/django_outbox/host/destination/dead.example/",
        "/admin/django_outbox/host/breakers/",
        "/admin/django_outbox/paymentattempt/",
    ):
        browser.get(path)
        body = browser.text("body")
        assert "403 Forbidden" in body, path
        assert "dead.example" not in browser.driver.page_source, path


def test_requeue_asks_first_and_a_delivered_delivery_only_when_asked(
    operator: Browser, sample: dict[str, int]
) -> None:
    from selenium.webdriver.support.ui import Select

    operator.get("/admin/django_outbox/delivery/overview/")
    operator.find("#by-state a[href*='state=failed']").click()
    operator.wait_for("#result_list")
    assert "state=failed" in operator.driver.current_url
    chosen = [item.text for item in operator.find_all("#changelist-filter li.selected")]
    assert chosen[:3] == ["failed", "All", "All"]  # state; due and host not chosen
    failed = sample["failed"]
    assert len(operator.find_all("#result_list tbody tr")) == min(failed, 100)
    operator.find("#action-toggle").click()
    Select(operator.find("select[name=action]")).select_by_value("requeue")
    operator.find("button[name=index]").click()
    operator.wait_for("#outbox-confirm-counts")
    selected = min(failed, 100)
    assert operator.text("h1") == f"Requeue {selected} of {selected} selected deliveries?"
    assert operator.text("#outbox-confirm-counts tr.state-failed td") == str(selected)
    assert Delivery.objects.filter(state=DeliveryState.FAILED).count() == failed  # not yet
    operator.find("#outbox-confirm").click()
    operator.wait_for("ul.messagelist")
    assert operator.messages() == [
        ("success", f"Requeued {selected} of the {selected} selected deliveries.")
    ]
    assert Delivery.objects.filter(state=DeliveryState.FAILED).count() == failed - selected

    # Bug 6: the Requeue button of a delivered delivery asks, and leaves it unless told.
    delivered = Delivery.objects.filter(state=DeliveryState.DELIVERED).first()
    assert delivered is not None
    operator.get(f"/admin/django_outbox/delivery/{delivered.pk}/change/")
    operator.find("#outbox-requeue").click()
    operator.wait_for("#outbox-confirm-counts")
    assert "left alone unless asked for below" in operator.text("tr.state-delivered")
    operator.find("#outbox-confirm").click()
    operator.wait_for("ul.messagelist")
    ((level, text),) = operator.messages()
    assert level == "warning" and text.startswith("Nothing was requeued")
    assert Delivery.objects.get(pk=delivered.pk).state == DeliveryState.DELIVERED
    operator.find("#outbox-requeue").click()
    operator.wait_for("#outbox-include").click()
    operator.find("#outbox-confirm").click()
    operator.wait_for("ul.messagelist")
    assert operator.messages() == [("success", "Requeued 1 of the 1 selected deliveries.")]
    assert Delivery.objects.get(pk=delivered.pk).state == DeliveryState.QUEUED
    # ...and giving up on nothing is no green success.
    refused = Delivery.objects.filter(state=DeliveryState.REFUSED).first()
    assert refused is not None
    operator.get(f"/admin/django_outbox/delivery/?state=refused&host={refused.host}")
    operator.find(f"input[name=_selected_action][value='{refused.pk}']").click()
    Select(operator.find("select[name=action]")).select_by_value("give_up")
    operator.find("button[name=index]").click()
    operator.wait_for("#outbox-confirm-counts")
    assert operator.find_all("#outbox-confirm") == []  # nothing it could change
    operator.find("#outbox-cancel").click()
    operator.wait_for("#result_list")
    assert LogEntry.objects.count() == 3  # the list's requeue, then two of the delivered one
    assert LogEntry.objects.filter(object_id=str(delivered.pk)).count() == 2


def test_a_hosts_page_requeues_since_refuses_a_bad_since_and_reset_closes_the_breaker(
    operator: Browser, sample: dict[str, int]
) -> None:
    policy = BreakerPolicy(threshold=3, cool_off=600)
    store = configured_store()
    assert store.admit(DEAD, policy).kind == "held"
    operator.get("/admin/django_outbox/delivery/overview/")
    operator.find("#failing a[href$='/destination/dead.example/']").click()
    operator.wait_for("#outbox-host-health")
    assert operator.text("h1") == "Host dead.example"
    assert "on 8 days" in operator.text("#outbox-host-failing")
    assert "its deliveries are skipped" in operator.text("#outbox-host-unavailable")
    assert "connect to dead.example timed out" in operator.text("#outbox-host-reason")
    assert operator.text("#outbox-host-breaker").startswith("open until")
    # Bug 4, in the console: a "since" that is no duration is a clean error.
    field = operator.find("#outbox-host-requeue input[name=since]")
    field.clear()
    field.send_keys("1x")
    operator.find("#outbox-host-requeue input[type=submit]").click()
    operator.wait_for("ul.messagelist")
    ((level, text),) = operator.messages()
    assert level == "error" and text.startswith("Since '1x': give a duration")
    failed = Delivery.objects.filter(host="dead.example", state=DeliveryState.FAILED).count()
    field = operator.find("#outbox-host-requeue input[name=since]")
    field.clear()
    field.send_keys("2d")
    operator.find("#outbox-host-requeue input[type=submit]").click()
    operator.wait_for("#outbox-confirm-counts")
    assert operator.text("h1") == f"Requeue {failed} of {failed} selected deliveries?"
    operator.find("#outbox-confirm").click()
    operator.wait_for("ul.messagelist")
    assert operator.messages() == [
        ("success", f"Requeued {failed} of the {failed} selected deliveries.")
    ]
    assert not Delivery.objects.filter(host="dead.example", state=DeliveryState.FAILED).exists()

    # Bug 3: "reset" on the hosts list closes the breaker too (it used to stay open).
    from selenium.webdriver.support.ui import Select

    operator.get("/admin/django_outbox/host/")
    row = Host.objects.get(name="dead.example")
    operator.find(f"input[name=_selected_action][value='{row.pk}']").click()
    Select(operator.find("select[name=action]")).select_by_value("reset")
    operator.find("button[name=index]").click()
    operator.wait_for("ul.messagelist")
    ((level, text),) = operator.messages()
    assert level == "success" and "breakers closed" in text
    assert not Host.objects.filter(name="dead.example").exists()
    assert store.admit(DEAD, policy).kind == "pass"


def test_a_host_is_paused_and_resumed_from_its_page(
    operator: Browser, sample: dict[str, int]
) -> None:
    """Issue 24: the host page pauses a host with a reason and an end, shows it (also
    in the list of paused hosts), refuses a bad end, and resumes it, sending its held
    deliveries again; each change is in the admin's log."""
    operator.get("/admin/django_outbox/host/destination/dead.example/")
    operator.wait_for("#outbox-host-pause")
    assert operator.text("#outbox-host-paused") == "no"
    assert (
        operator.text("#outbox-host-last-failure") == "timeout: connect to dead.example timed out"
    )
    operator.find("#outbox-host-pause input[name=until]").send_keys("soon")
    operator.find("#outbox-host-pause input[type=submit]").click()
    operator.wait_for("ul.messagelist")
    ((level, text),) = operator.messages()
    assert level == "error" and text.startswith("Not paused: 'soon': give a duration")
    operator.find("#outbox-host-pause input[name=reason]").send_keys("asked by its admin")
    operator.find("#outbox-host-pause input[name=until]").send_keys("2h")
    operator.find("#outbox-host-pause input[type=submit]").click()
    operator.wait_for("#outbox-host-resume")
    ((level, text),) = operator.messages()
    assert level == "success" and text.startswith("Paused dead.example until ")
    assert "asked by its admin" in operator.text("#outbox-host-paused")
    operator.get("/admin/django_outbox/hostpause/")
    assert "dead.example" in operator.text("#result_list")
    held = Delivery.objects.filter(host="dead.example", state=DeliveryState.QUEUED)
    parked = held.update(  # as a worker parks them
        last_error="held: dead.example is paused: asked by its admin",
        next_attempt_at=timezone.now() + timedelta(minutes=5),
        dispatched_at=None,
    )
    assert parked > 0
    operator.get("/admin/django_outbox/host/destination/dead.example/")
    operator.find("#outbox-host-resume input[type=submit]").click()
    operator.wait_for("#outbox-host-pause")
    ((level, text),) = operator.messages()
    assert (level, text) == (
        "success",
        f"Resumed dead.example: {parked} held deliveries sent again.",
    )
    assert operator.text("#outbox-host-paused") == "no"
    assert not held.filter(next_attempt_at__gt=timezone.now()).exists()
    logged = LogEntry.objects.filter(object_repr__endswith="dead.example")
    assert {entry.object_repr for entry in logged} >= {
        "paused dead.example",
        "resumed dead.example",
    }


def test_the_overview_refreshes_itself_every_5_s_when_asked(
    operator: Browser, sample: dict[str, int]
) -> None:
    operator.get("/admin/django_outbox/delivery/overview/")
    operator.wait_for("#outbox-cards")
    due = int(operator.text("#due").replace(",", ""))
    operator.js("window.outboxNotReloaded = true;")
    later = Delivery.objects.filter(state=DeliveryState.QUEUED).first()
    assert later is not None
    # Nothing changes on the page until it is asked to refresh.
    Delivery.objects.filter(pk=later.pk).update(next_attempt_at=timezone.now() + timedelta(hours=1))
    operator.find("#outbox-refresh").click()
    assert "refresh=1" in operator.driver.current_url
    operator.until(lambda _: operator.text("#due") == f"{due - 1:,}", seconds=20)
    started = timezone.now()
    Delivery.objects.filter(pk=later.pk).update(next_attempt_at=timezone.now())
    operator.until(lambda _: operator.text("#due") == f"{due:,}", seconds=20)
    assert timezone.now() - started < timedelta(seconds=15)  # within a few refreshes of 5 s
    assert operator.js("return window.outboxNotReloaded === true")  # swapped, not reloaded
    assert operator.text("#outbox-refreshed").startswith("updated at")
    operator.find("#outbox-refresh").click()
    assert "refresh" not in operator.driver.current_url


def test_the_console_fits_1400_px(operator: Browser, sample: dict[str, int]) -> None:
    # A worker beating, as in a running outbox (the sample writes the tables only).
    Heartbeat.objects.create(name="sample-worker:1:a", beat_at=Now())
    operator.get("/admin/django_outbox/delivery/overview/")
    operator.wait_for("#outbox-cards")
    assert operator.find_all("#outbox-no-workers") == []
    assert operator.fits()
    operator.screenshot("overview")

    for query in ("", "?state=queued", "?state=failed"):
        operator.get(f"/admin/django_outbox/delivery/{query}")
        operator.wait_for("#result_list")
        assert operator.js("return window.innerWidth") >= WIDTH - 20
        assert operator.fits() and operator.fits("#changelist .results"), query
        headers = [cell.text for cell in operator.find_all("#result_list thead th")]
        for column in ("INBOX", "LAST ERROR", "NEXT ATTEMPT", "CREATED", "FINISHED", "BATCH TAG"):
            assert column in headers
        right = operator.js(
            "return Math.max(...[...document.querySelectorAll('#result_list tr > *')]"
            ".map(cell => cell.getBoundingClientRect().right))"
        )
        assert right <= operator.js("return document.documentElement.clientWidth"), query
    operator.screenshot("deliveries")

    failed = Delivery.objects.filter(state="failed", history__isnull=False).first()
    assert failed is not None
    operator.get(f"/admin/django_outbox/delivery/{failed.pk}/change/")
    operator.wait_for("#history-group")
    assert operator.fits()
    operator.screenshot("delivery")

    operator.get("/admin/django_outbox/host/destination/dead.example/")
    operator.wait_for("#outbox-history")
    assert operator.fits()
    operator.screenshot("host")

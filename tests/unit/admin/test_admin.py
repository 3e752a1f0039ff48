"""The admin's pages render, and requeue, give up and reset ask first, act through the
package's functions, say honestly what they did and are written to the admin's log."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from django_outbox.models import Delivery, DeliveryState, Host
from tests.support.admin_pages import POLICY, said, shared_store, some_deliveries

pytestmark = pytest.mark.django_db


def test_pages_render(admin_client: Client) -> None:
    rows = some_deliveries()
    failed = rows["failed"]
    host = Host.objects.get()
    pages = [
        reverse("admin:django_outbox_delivery_changelist"),
        reverse("admin:django_outbox_delivery_changelist") + "?state=failed&host=dead.example",
        reverse("admin:django_outbox_delivery_changelist") + f"?message={failed.message_id}&tag=x",
        reverse("admin:django_outbox_delivery_change", args=[failed.pk]),
        reverse("admin:django_outbox_message_changelist"),
        reverse("admin:django_outbox_message_change", args=[failed.message_id]),
        reverse("admin:django_outbox_host_changelist"),
        reverse("admin:django_outbox_host_page", args=["dead.example"]),
        reverse("admin:django_outbox_host_page", args=["never.example"]),
        reverse("admin:django_outbox_overview"),
        reverse("admin:django_outbox_breakers"),
        reverse("admin:django_outbox_paymentattempt_changelist"),
    ]
    for url in pages:
        assert admin_client.get(url).status_code == 200, url
    page = admin_client.get(pages[1]).content.decode()
    assert "HTTP 503" in page
    host_row = admin_client.get(reverse("admin:django_outbox_host_change", args=[host.pk]))
    assert host_row.status_code == 302
    assert host_row["Location"] == reverse("admin:django_outbox_host_page", args=["dead.example"])
    assert admin_client.get(reverse("admin:django_outbox_delivery_add")).status_code == 403
    bad = admin_client.get(reverse("admin:django_outbox_delivery_changelist") + "?message=x")
    assert bad.status_code == 302 and "e=1" in bad["Location"]


def act(client: Client, action: str, ids: list[int], **more: Any) -> Any:
    """Post a change list action, as its form does."""
    data = {"action": action, "index": "0", "_selected_action": ids, **more}
    return client.post(reverse("admin:django_outbox_delivery_changelist"), data)


def test_requeue_asks_first_with_counts_by_state_then_acts_and_logs(
    admin_client: Client,
    django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
) -> None:
    rows = some_deliveries()
    ids = [row.pk for row in rows.values()]
    page = act(admin_client, "requeue", ids)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Requeue 1 of 3 selected deliveries?" in html
    assert '<tr class="state-failed"><th scope="row">failed</th><td>1</td>' in html
    assert "left alone unless asked for below" in html  # the delivered one
    assert "left alone: still live" in html  # the queued one
    assert 'name="include"' in html
    assert Delivery.objects.filter(state=DeliveryState.FAILED).count() == 1  # nothing yet
    with django_capture_on_commit_callbacks() as callbacks:
        done = act(admin_client, "requeue", ids, confirmed="yes")
    assert done.status_code == 302
    assert len(callbacks) == 1
    assert set(Delivery.objects.values_list("state", flat=True)) == {"queued", "delivered"}
    assert said(done) == (
        "success",
        "Requeued 1 of the 3 selected deliveries; left alone: 1 queued (still live: queued, "
        "waiting or being sent), 1 delivered (not asked for).",
    )
    entry = LogEntry.objects.get()
    assert entry.object_id is None
    assert entry.object_repr == "requeue the deliveries ticked in the list (3)"
    assert entry.get_change_message().startswith("Requeued 1 of the 3")


def test_a_delivered_delivery_is_requeued_only_when_asked(admin_client: Client) -> None:
    delivered = some_deliveries()["delivered"]
    nothing = act(admin_client, "requeue", [delivered.pk], confirmed="yes")
    assert said(nothing) == (
        "warning",
        "Nothing was requeued (of the 1 selected deliveries); "
        "left alone: 1 delivered (not asked for).",
    )
    assert Delivery.objects.get(pk=delivered.pk).state == DeliveryState.DELIVERED
    assert LogEntry.objects.get().object_id == str(delivered.pk)
    asked = act(admin_client, "requeue", [delivered.pk], confirmed="yes", include="yes")
    assert said(asked)[0] == "success"
    assert Delivery.objects.get(pk=delivered.pk).state == DeliveryState.QUEUED


def test_giving_up_on_nothing_is_a_warning(admin_client: Client) -> None:
    rows = some_deliveries()
    done = act(admin_client, "give_up", [rows["delivered"].pk], confirmed="yes")
    assert said(done) == (
        "warning",
        "Nothing was given up on (of the 1 selected deliveries); "
        "left alone: 1 delivered (already finished).",
    )
    done = act(admin_client, "give_up", [rows["queued"].pk], confirmed="yes")
    assert said(done) == ("success", "Gave up on 1 of the 1 selected deliveries.")
    queued = Delivery.objects.get(pk=rows["queued"].pk)
    assert queued.state == DeliveryState.FAILED and "given up by admin" in queued.last_error


def test_every_row_the_filters_match_is_taken_with_select_across(admin_client: Client) -> None:
    rows = some_deliveries()
    Delivery.objects.filter(pk=rows["queued"].pk).update(
        state=DeliveryState.FAILED, finished_at=rows["failed"].finished_at
    )
    url = reverse("admin:django_outbox_delivery_changelist") + "?state=failed"
    data = {"action": "requeue", "index": "0", "select_across": "1"}
    page = admin_client.post(url, {**data, "_selected_action": [rows["failed"].pk]})
    assert b"Requeue 2 of 2 selected deliveries?" in page.content
    assert b"every delivery the list&#x27;s filters match (state=failed)" in page.content
    admin_client.post(url, {**data, "_selected_action": [rows["failed"].pk], "confirmed": "yes"})
    assert set(Delivery.objects.values_list("state", flat=True)) == {"queued", "delivered"}


def test_a_deliverys_page_has_its_button_and_it_asks_first(admin_client: Client) -> None:
    rows = some_deliveries()
    failed, queued = rows["failed"], rows["queued"]
    page = admin_client.get(reverse("admin:django_outbox_delivery_change", args=[failed.pk]))
    requeue = reverse("admin:django_outbox_delivery_requeue", args=[failed.pk])
    assert requeue in page.content.decode()
    assert "Give up" not in page.content.decode()
    live = admin_client.get(reverse("admin:django_outbox_delivery_change", args=[queued.pk]))
    assert (
        reverse("admin:django_outbox_delivery_give_up", args=[queued.pk]) in live.content.decode()
    )
    confirmation = admin_client.get(requeue)
    assert b"Requeue 1 of 1 selected deliveries?" in confirmation.content
    assert Delivery.objects.get(pk=failed.pk).state == DeliveryState.FAILED
    done = admin_client.post(requeue, {"confirmed": "yes"})
    assert done["Location"] == reverse("admin:django_outbox_delivery_change", args=[failed.pk])
    assert Delivery.objects.get(pk=failed.pk).state == DeliveryState.QUEUED
    entry = LogEntry.objects.get()
    assert entry.object_id == str(failed.pk)
    history = admin_client.get(reverse("admin:django_outbox_delivery_history", args=[failed.pk]))
    assert b"Requeued 1 of the 1 selected deliveries." in history.content


def test_resetting_a_host_closes_its_breaker_too(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    store = shared_store(monkeypatch, settings)
    some_deliveries()
    store.record("host:dead.example", POLICY, failed=True, admission=None)
    host = Host.objects.get()
    done = admin_client.post(
        reverse("admin:django_outbox_host_changelist"),
        {"action": "reset", "index": "0", "_selected_action": [host.pk]},
    )
    assert not Host.objects.exists()
    assert store.admit("host:dead.example", POLICY).kind == "pass"
    assert said(done) == (
        "success",
        "Reset dead.example: available again (1 had failures, now forgotten); breakers closed.",
    )
    entry = LogEntry.objects.get()
    assert (entry.object_id, entry.object_repr) == (str(host.pk), "reset dead.example")


def test_a_hosts_page_requeues_what_failed_since_and_refuses_a_bad_since(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    store = shared_store(monkeypatch, settings)
    rows = some_deliveries()
    store.record("host:dead.example", POLICY, failed=True, admission=None)
    page = admin_client.get(reverse("admin:django_outbox_host_page", args=["dead.example"]))
    html = page.content.decode()
    assert "on 3 days" in html
    assert "HTTP 503 &lt;b&gt;oops&lt;/b&gt; (HTTP 503)" in html  # the reason, escaped
    assert "<strong>open</strong> until" in html
    url = reverse("admin:django_outbox_host_requeue", args=["dead.example"])
    recent = admin_client.get(url, {"state": "failed", "since": "30m"})
    assert b"Requeue 0 of 0 selected deliveries?" in recent.content
    confirmation = admin_client.get(url, {"state": "failed", "since": "2h"})
    assert b"Requeue 1 of 1 selected deliveries?" in confirmation.content
    admin_client.post(url + "?state=failed&since=2h", {"confirmed": "yes"})
    assert Delivery.objects.get(pk=rows["failed"].pk).state == DeliveryState.QUEUED
    bad = admin_client.get(url, {"state": "failed", "since": "1x"}, follow=True)
    assert said(bad) == (
        "error",
        "Since '1x': give a duration (90s, 30m, 2h, 7d) or a date; nothing was changed.",
    )
    reset = admin_client.post(reverse("admin:django_outbox_host_reset", args=["dead.example"]))
    assert reset.status_code == 302
    assert store.admit("host:dead.example", POLICY).kind == "pass"


def test_open_breakers_are_listed_and_reset(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    store = shared_store(monkeypatch, settings)
    store.record("host:dead.example", POLICY, failed=True, admission=None)
    store.record("inbox:https://other.example/inbox", POLICY, failed=True, admission=None)
    url = reverse("admin:django_outbox_breakers")
    page = admin_client.get(url).content.decode()
    assert "host:dead.example" in page and "inbox:https://other.example/inbox" in page
    assert reverse("admin:django_outbox_host_page", args=["other.example"]) in page
    admin_client.post(url, {"key": "host:dead.example"})
    assert store.admit("host:dead.example", POLICY).kind == "pass"
    assert [state.key for state in store.states()] == ["inbox:https://other.example/inbox"]
    admin_client.post(url, {"key": "inbox:https://other.example/inbox"})
    assert b"No breaker is open" in admin_client.get(url).content
    assert LogEntry.objects.count() == 2


def test_breakers_in_worker_memory_are_said_to_be_out_of_sight(
    admin_client: Client, settings: Any
) -> None:
    settings.OUTBOX_BREAKER_CACHE = None  # each process's memory, even with Redis about
    for url in (
        reverse("admin:django_outbox_breakers"),
        reverse("admin:django_outbox_overview"),
        reverse("admin:django_outbox_host_page", args=["dead.example"]),
    ):
        page = admin_client.get(url).content.decode()
        assert "No breaker is open" not in page
        assert "memory" in page


def test_the_tag_filter_offers_a_search_box_and_ten_tags_however_many_there_are(
    admin_client: Client,
) -> None:
    from tests.support.observability import message

    for n in range(40):
        message(tag=f"move-{n}")
    url = reverse("admin:django_outbox_delivery_changelist")
    html = admin_client.get(url + "?state=failed").content.decode()
    assert html.count("?state=failed&amp;tag=move-") == 10
    assert "tag=move-39" in html and "tag=move-29" not in html
    assert 'id="outbox-filter-tag"' in html
    assert '<input type="hidden" name="state" value="failed">' in html
    chosen = admin_client.get(url + "?tag=move-3").content.decode()
    assert '<li class="selected">\n    <a href="?tag=move-3">move-3</a>' in chosen


def test_a_messages_page_shows_its_body_indented_and_its_deliveries_by_state(
    admin_client: Client,
) -> None:
    failed = some_deliveries()["failed"]
    html = admin_client.get(
        reverse("admin:django_outbox_message_change", args=[failed.message_id])
    ).content.decode()
    assert "{\n  &quot;type&quot;: &quot;Create&quot;" in html
    listing = reverse("admin:django_outbox_delivery_changelist")
    assert f'<a href="{listing}?message={failed.message_id}&amp;state=failed">1 failed</a>' in html
    assert f'<a href="{listing}?message={failed.message_id}">all 3</a>' in html
    chosen = admin_client.get(f"{listing}?message={failed.message_id}").content.decode()
    assert f"Create #{failed.message_id} from" in chosen  # the filter names the message

"""The admin overview, its charts, the history inline and the progress bars."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_outbox.admin.charts import bar_chart, nice_ceiling
from django_outbox.breakers import BreakerPolicy
from django_outbox.models import Attempt, DeliveryState, Heartbeat, Host
from django_outbox.status.timeline import batches_in_progress, forget_ended_hours, timeline
from tests.support.observability import deliveries, shared_breakers

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_redis")]


def some_rows() -> None:
    now = timezone.now()
    deliveries(5, state=DeliveryState.DELIVERED, finished_at=now - timedelta(minutes=3))
    deliveries(2, state=DeliveryState.FAILED, finished_at=now - timedelta(hours=5))
    deliveries(3, state=DeliveryState.QUEUED, next_attempt_at=now - timedelta(minutes=2))
    (failing,) = deliveries(1, host="dead.example", state=DeliveryState.QUEUED)
    Attempt.objects.create(
        delivery=failing, number=1, host="dead.example", at=now - timedelta(minutes=10),
        status=503, result="retry", error="HTTP 503 <b>oops</b>",
    )  # fmt: skip


def test_the_overview_shows_what_is_behind_and_what_fails(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    some_rows()
    settings.OUTBOX_BREAKER_CACHE = "default"  # as if shared: the store below stands for it
    shared_breakers(monkeypatch).record(
        "host:dead.example", BreakerPolicy(1),
        failed=True, admission=None,
    )  # fmt: skip
    page = admin_client.get(reverse("admin:django_outbox_overview"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="queued">4</a> queued' in html
    assert '<span class="big" id="due">4</span>' in html
    assert '<span class="big" id="oldest-due">2m 00s</span>' in html
    assert '<span class="big" id="open-breakers">1</span>' in html
    assert '<span class="big" id="failing-hosts">1</span>' in html
    assert "host:dead.example" in html
    assert "/admin/django_outbox/host/destination/dead.example/" in html
    assert "/admin/django_outbox/delivery/?host=dead.example" in html
    assert "n = 5 latest finished" in html
    assert html.count("<svg") >= 4
    assert "delivered (5)" in html  # the last hour's legend
    assert "refused or failed (2)" in html  # the day's


def test_no_worker_beating_is_an_alert_card(admin_client: Client) -> None:
    some_rows()
    url = reverse("admin:django_outbox_overview")
    html = admin_client.get(url).content.decode()
    assert 'id="outbox-no-workers" role="alert"' in html
    assert "No worker process is beating" in html
    assert "4 due deliveries wait" in html
    Heartbeat.objects.create(name="w1:1:x", beat_at=Now())
    Heartbeat.objects.create(name="w2:1:x", beat_at=timezone.now() - timedelta(minutes=5))
    html = admin_client.get(url).content.decode()
    assert "No worker process is beating" not in html
    assert '<span class="big" id="workers">1</span>' in html


def test_the_failing_hosts_card_counts_what_its_table_is_the_worst_of(
    admin_client: Client,
) -> None:
    now = timezone.now()
    for n in range(12):
        (row,) = deliveries(1, host=f"h{n}.example", state=DeliveryState.QUEUED)
        Attempt.objects.create(
            delivery=row, number=1, host=row.host, at=now, status=503, result="retry"
        )
    Host.objects.create(name="old.example", last_failure_day=now.date())
    html = admin_client.get(reverse("admin:django_outbox_overview")).content.decode()
    assert '<span class="big" id="failing-hosts">13</span>' in html
    assert "Most failing hosts (10 of 13)" in html
    assert "1 for a day or more" in html


def test_times_are_local_with_seconds(admin_client: Client, settings: Any) -> None:
    settings.TIME_ZONE = "Asia/Kolkata"  # UTC+05:30: the hours' labels end in :30
    some_rows()
    html = admin_client.get(reverse("admin:django_outbox_overview")).content.decode()
    assert "per hour (Asia/Kolkata)" in html
    assert re.search(r">\d\d:30</text>", html)
    local = timezone.localtime(timezone.now(), ZoneInfo("Asia/Kolkata"))
    assert f"Read at {local:%Y-%m-%d %H:}" in html


def test_the_overview_costs_a_fixed_number_of_queries(admin_client: Client) -> None:
    url = reverse("admin:django_outbox_overview")
    some_rows()
    with CaptureQueriesContext(connection) as few:
        admin_client.get(url)
    for n in range(5):
        deliveries(20, host=f"h{n}.example", state=DeliveryState.QUEUED)
    forget_ended_hours()
    with CaptureQueriesContext(connection) as more:
        admin_client.get(url)
    assert len(more) == len(few)


def test_the_app_index_and_the_deliveries_link_to_the_overview(admin_client: Client) -> None:
    url = reverse("admin:django_outbox_overview")
    index = admin_client.get(reverse("admin:app_list", args=["django_outbox"]))
    assert url in index.content.decode()
    listing = admin_client.get(reverse("admin:django_outbox_delivery_changelist"))
    assert url in listing.content.decode()


def test_a_deliverys_page_shows_its_attempt_history(admin_client: Client) -> None:
    some_rows()
    attempt = Attempt.objects.get()
    page = admin_client.get(
        reverse("admin:django_outbox_delivery_change", args=[attempt.delivery_id])
    )
    html = page.content.decode()
    assert "Attempt history (failed and held attempts)" in html
    assert "HTTP 503 &lt;b&gt;oops&lt;/b&gt;" in html


def test_messages_show_progress_as_a_bar(admin_client: Client) -> None:
    some_rows()
    html = admin_client.get(reverse("admin:django_outbox_message_changelist")).content.decode()
    assert 'style="width:100.0%;background:#417690"' in html
    assert "5 delivered, 0 failed, 0 in progress" in html


def test_timeline_buckets_and_batches_under_way() -> None:
    some_rows()
    hour = timeline(timedelta(hours=1), "minute")
    assert len(hour) in (60, 61)
    assert sum(bucket.delivered for bucket in hour) == 5
    assert sum(bucket.failed_attempts for bucket in hour) == 1
    day = timeline(timedelta(days=1), "hour")
    assert sum(bucket.given_up for bucket in day) == 2
    batches = batches_in_progress()
    assert [batch.counts for batch in batches] == [{"queued": 1}, {"queued": 3}]


def test_a_days_chart_counts_ended_hours_once() -> None:
    some_rows()
    first = timeline(timedelta(days=1), "hour")
    with CaptureQueriesContext(connection) as again:
        second = timeline(timedelta(days=1), "hour")
    assert second == first
    assert len(again) == 2  # the current hour's deliveries and failed attempts


def test_charts_escape_their_text_and_scale_to_a_round_number() -> None:
    svg = bar_chart(["<a>", "b"], [("x&y", "#000", [3, 7])], title="t<")
    assert "<a>" not in svg and "&lt;a&gt;" in svg
    assert "x&amp;y 7" in svg and "t&lt;" in svg
    assert [nice_ceiling(v) for v in (0, 1, 7, 12, 230, 999)] == [1, 1, 10, 20, 250, 1000]

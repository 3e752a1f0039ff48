"""The webhook endpoints' admin: an endpoint's page says whether it is disabled and
since when, with its latest failure; its Enable button (and the list's action)
enables it as ``outbox.enable_endpoint`` does, says so, and is logged."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_outbox.admin.formatting import local_time
from django_outbox.models import Endpoint
from tests.support.admin_pages import said, staff_client

pytestmark = pytest.mark.django_db

HOOK = "https://hooks.example/receive"
OTHER = "https://other.example/receive"
ERROR = "HTTP 503 <b>down</b>"
REQUEUE = "Deliveries skipped while disabled stay skipped: requeue them to send them."


def failing(url: str, *, disabled: bool) -> Endpoint:
    """An endpoint's row as a worker leaves it: five failure days, disabled or not."""
    now = timezone.now()
    return Endpoint.objects.create(
        url=url,
        failure_days=5 if disabled else 2,
        first_failure_at=now - timedelta(days=4),
        last_failure_day=date.today(),
        last_status=503,
        last_error=ERROR,
        disabled_since=now - timedelta(minutes=3) if disabled else None,
    )


def page(row: Endpoint) -> str:
    return reverse("admin:django_outbox_endpoint_change", args=[row.pk])


def test_a_disabled_endpoints_page_says_so_and_its_button_enables_it(
    admin_client: Client,
) -> None:
    row = failing(HOOK, disabled=True)
    assert row.disabled_since is not None
    html = admin_client.get(page(row)).content.decode()
    assert "<strong>disabled</strong> since " + local_time(row.disabled_since) in html
    assert "its deliveries are skipped until it is enabled" in html
    assert "HTTP 503 &lt;b&gt;down&lt;/b&gt;" in html and "<b>down" not in html
    assert 'value="Enable"' in html
    assert "?state=skipped&amp;q=https%3A%2F%2Fhooks.example%2Freceive" in html
    enable = reverse("admin:django_outbox_endpoint_enable", args=[row.pk])
    assert admin_client.get(enable).status_code == 405
    response = admin_client.post(enable)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:django_outbox_endpoint_changelist")
    assert said(response) == (
        "success",
        f"Enabled {HOOK} (it was disabled): failure days forgotten; new deliveries are "
        f"sent (workers see it within 1m 00s). {REQUEUE}",
    )
    assert not Endpoint.objects.exists()
    entry = LogEntry.objects.get()
    assert (entry.object_id, entry.object_repr) == (str(row.pk), f"enable {HOOK}")
    assert admin_client.post(enable).status_code == 404  # enabled: no row any more


def test_a_failing_endpoint_not_yet_disabled_is_said_to_be_enabled(
    admin_client: Client,
) -> None:
    row = failing(HOOK, disabled=False)
    html = admin_client.get(page(row)).content.decode()
    assert "enabled: its deliveries are sent (disabled after 5 failure days)" in html
    assert 'value="Forget its failure days"' in html
    response = admin_client.post(reverse("admin:django_outbox_endpoint_enable", args=[row.pk]))
    level, text = said(response)
    assert level == "success" and text.startswith(f"Enabled {HOOK} (it was not disabled)")
    assert REQUEUE not in text


def test_the_list_shows_since_when_and_its_action_counts_what_was_disabled(
    admin_client: Client,
) -> None:
    rows = [failing(HOOK, disabled=True), failing(OTHER, disabled=False)]
    listing = reverse("admin:django_outbox_endpoint_changelist")
    disabled = admin_client.get(listing + "?disabled_since__isempty=0").content.decode()
    assert HOOK in disabled and OTHER not in disabled
    response = admin_client.post(
        listing, {"action": "enable", "index": "0", "_selected_action": [r.pk for r in rows]}
    )
    level, text = said(response)
    assert level == "success"
    assert text.startswith("Enabled 2 endpoints (1 of them were disabled): ")
    assert not Endpoint.objects.exists()
    assert LogEntry.objects.get().object_repr == "enable 2 endpoints"


def test_viewing_endpoints_shows_no_button_and_cannot_enable() -> None:
    row = failing(HOOK, disabled=True)
    client = staff_client("view_endpoint")
    html = client.get(page(row)).content.decode()
    assert "<strong>disabled</strong>" in html
    assert "outbox-endpoint-enable" not in html and "outbox-endpoint-skipped" not in html
    enable = reverse("admin:django_outbox_endpoint_enable", args=[row.pk])
    assert client.post(enable).status_code == 403
    assert Endpoint.objects.get().disabled_since is not None


def test_staff_without_endpoint_permissions_get_403() -> None:
    row = failing(HOOK, disabled=True)
    client = staff_client("view_delivery")
    assert client.get(page(row)).status_code == 403
    enable = reverse("admin:django_outbox_endpoint_enable", args=[row.pk])
    assert client.post(enable).status_code == 403
    assert Endpoint.objects.get().disabled_since is not None

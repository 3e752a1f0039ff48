"""Who sees and does what in the outbox's admin.

A staff user without django_outbox permissions gets 403 on every outbox page
(the overview used to answer 200, with hosts, actor ids, tags and breaker keys)
and sees no link to one; viewing is not acting; breakers need the host permissions.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from django_outbox.breakers import MemoryBreakerStore
from django_outbox.models import Delivery, DeliveryState, Host, Message
from tests.support.admin_pages import POLICY, shared_store, some_deliveries, staff_client

pytestmark = pytest.mark.django_db

KEY = "host:dead.example"


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, settings: Any) -> MemoryBreakerStore:
    shared = shared_store(monkeypatch, settings)
    shared.record(KEY, POLICY, failed=True, admission=None)
    return shared


def outbox_pages() -> list[tuple[str, str]]:
    """Every page of the outbox's admin, as ``(method, url)``."""
    rows = some_deliveries()
    failed, queued = rows["failed"], rows["queued"]
    host = Host.objects.get()
    one = "dead.example"
    gets = [
        reverse("admin:django_outbox_overview"),
        reverse("admin:django_outbox_delivery_changelist"),
        reverse("admin:django_outbox_delivery_change", args=[failed.pk]),
        reverse("admin:django_outbox_delivery_history", args=[failed.pk]),
        reverse("admin:django_outbox_delivery_requeue", args=[failed.pk]),
        reverse("admin:django_outbox_delivery_give_up", args=[queued.pk]),
        reverse("admin:django_outbox_message_changelist"),
        reverse("admin:django_outbox_message_change", args=[Message.objects.get().pk]),
        reverse("admin:django_outbox_host_changelist"),
        reverse("admin:django_outbox_host_change", args=[host.pk]),
        reverse("admin:django_outbox_host_page", args=[one]),
        reverse("admin:django_outbox_host_requeue", args=[one]),
        reverse("admin:django_outbox_host_give_up", args=[one]),
        reverse("admin:django_outbox_breakers"),
        reverse("admin:django_outbox_paymentattempt_changelist"),
    ]
    posts = [
        reverse("admin:django_outbox_delivery_changelist"),
        reverse("admin:django_outbox_delivery_requeue", args=[failed.pk]),
        reverse("admin:django_outbox_host_reset", args=[one]),
        reverse("admin:django_outbox_host_requeue", args=[one]),
        reverse("admin:django_outbox_breakers"),
    ]
    return [("get", url) for url in gets] + [("post", url) for url in posts]


def test_staff_without_outbox_permissions_get_403_everywhere_and_no_links(
    store: MemoryBreakerStore,
) -> None:
    pages = outbox_pages()
    client = staff_client()
    for method, url in pages:
        data = {"action": "requeue", "index": "0", "confirmed": "yes", "key": KEY}
        data["_selected_action"] = list(Delivery.objects.values_list("pk", flat=True))
        page = getattr(client, method)(url, data if method == "post" else None)
        assert page.status_code == 403, (method, url)
        assert b"dead.example" not in page.content
    index = client.get(reverse("admin:index")).content.decode()
    assert "/admin/django_outbox/" not in index
    # The admin site answers its own app index of an app the user cannot see with 404.
    assert client.get(reverse("admin:app_list", args=["django_outbox"])).status_code == 404
    assert Delivery.objects.filter(state=DeliveryState.FAILED).count() == 1
    assert Host.objects.exists()
    assert store.admit(KEY, POLICY).kind == "held"


def test_viewing_deliveries_shows_the_overview_without_hosts_or_breakers(
    store: MemoryBreakerStore,
) -> None:
    some_deliveries()
    client = staff_client("view_delivery")
    page = client.get(reverse("admin:django_outbox_overview"))
    assert page.status_code == 200
    html = page.content.decode()
    assert KEY not in html
    assert reverse("admin:django_outbox_breakers") not in html
    assert "/admin/django_outbox/host/destination/" not in html
    index = client.get(reverse("admin:app_list", args=["django_outbox"])).content.decode()
    assert reverse("admin:django_outbox_overview") in index
    assert reverse("admin:django_outbox_breakers") not in index
    failed = Delivery.objects.get(state=DeliveryState.FAILED)
    change = client.get(reverse("admin:django_outbox_delivery_change", args=[failed.pk]))
    assert reverse("admin:django_outbox_delivery_requeue", args=[failed.pk]) not in (
        change.content.decode()
    )
    url = reverse("admin:django_outbox_delivery_requeue", args=[failed.pk])
    assert client.post(url, {"confirmed": "yes"}).status_code == 403
    assert (
        client.get(reverse("admin:django_outbox_host_page", args=["dead.example"])).status_code
        == 403
    )


def test_staff_without_the_view_permission_cannot_see_breakers(store: MemoryBreakerStore) -> None:
    client = staff_client("view_delivery")
    url = reverse("admin:django_outbox_breakers")
    page = client.get(url)
    assert page.status_code == 403
    assert KEY.encode() not in page.content
    assert client.post(url, {"key": KEY}).status_code == 403
    assert store.admit(KEY, POLICY).kind == "held"


def test_viewing_hosts_shows_the_breakers_but_cannot_reset_them(store: MemoryBreakerStore) -> None:
    client = staff_client("view_host", "view_delivery")
    url = reverse("admin:django_outbox_breakers")
    page = client.get(url)
    assert page.status_code == 200
    assert KEY.encode() in page.content
    assert b"Reset the selected breakers" not in page.content
    assert client.post(url, {"key": KEY}).status_code == 403
    host = client.get(reverse("admin:django_outbox_host_page", args=["dead.example"]))
    assert host.status_code == 200
    assert b"outbox-host-actions" not in host.content
    reset = reverse("admin:django_outbox_host_reset", args=["dead.example"])
    assert client.post(reset).status_code == 403
    assert store.admit(KEY, POLICY).kind == "held"


def test_changing_hosts_may_reset_them(store: MemoryBreakerStore) -> None:
    client = staff_client("view_host", "change_host")
    assert (
        b"Reset the selected breakers"
        in client.get(reverse("admin:django_outbox_breakers")).content
    )
    client.post(reverse("admin:django_outbox_breakers"), {"key": KEY})
    assert store.admit(KEY, POLICY).kind == "pass"

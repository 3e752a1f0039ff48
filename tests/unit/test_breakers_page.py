"""Finding 9: the breakers page shows destinations only to users who may view hosts.

It used to check staff status alone, so any staff user saw the keys of open breakers
(destination hosts, and with per-inbox breakers the inbox URLs).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_outbox import admin as outbox_admin
from django_outbox.breakers import BreakerPolicy, MemoryBreakerStore

pytestmark = pytest.mark.django_db

KEY = "host:dead.example"
POLICY = BreakerPolicy(threshold=1, cool_off=60)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> MemoryBreakerStore:
    shared = MemoryBreakerStore()
    shared.record(KEY, POLICY, failed=True, admission=None)
    monkeypatch.setattr(outbox_admin, "configured_store", lambda: shared)
    return shared


def staff_client(*permissions: str) -> Client:
    user = User.objects.create_user("staff", password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_outbox", codename__in=permissions)
    )
    client = Client()
    client.force_login(user)
    return client


URL = "admin:django_outbox_breakers"


def test_staff_without_the_view_permission_is_refused(store: MemoryBreakerStore) -> None:
    client = staff_client()
    page = client.get(reverse(URL))
    assert page.status_code == 403
    assert KEY.encode() not in page.content
    assert client.post(reverse(URL), {"key": KEY}).status_code == 403
    assert store.admit(KEY, POLICY).kind == "held"


def test_viewing_hosts_shows_the_breakers_but_cannot_reset_them(store: MemoryBreakerStore) -> None:
    client = staff_client("view_host")
    page = client.get(reverse(URL))
    assert page.status_code == 200
    assert KEY.encode() in page.content
    assert b"Reset the selected breakers" not in page.content
    assert client.post(reverse(URL), {"key": KEY}).status_code == 403
    assert store.admit(KEY, POLICY).kind == "held"


def test_changing_hosts_may_reset_them(store: MemoryBreakerStore) -> None:
    client = staff_client("view_host", "change_host")
    assert b"Reset the selected breakers" in client.get(reverse(URL)).content
    client.post(reverse(URL), {"key": KEY})
    assert store.admit(KEY, POLICY).kind == "pass"

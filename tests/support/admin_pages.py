"""Rows, users and a breaker store for the admin's tests."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.http import HttpResponse
from django.test import Client
from django.utils import timezone

from django_outbox import outbox
from django_outbox.breakers import BreakerPolicy, MemoryBreakerStore
from django_outbox.models import Attempt, Delivery, DeliveryState, Host
from testproject.demo.keys import ACTOR

POLICY = BreakerPolicy(threshold=1, cool_off=60)


def shared_store(monkeypatch: pytest.MonkeyPatch, settings: Any) -> MemoryBreakerStore:
    """One breaker store that every admin page and status reader sees, as Redis would be
    (``OUTBOX_BREAKER_CACHE`` names a cache, so the pages do not say they cannot see)."""
    settings.OUTBOX_BREAKER_CACHE = "default"
    settings.OUTBOX_METRICS_CACHE = None
    store = MemoryBreakerStore()
    for module in (
        "django_outbox.admin.hosts",
        "django_outbox.status.snapshot",
        "django_outbox.status.host_report",
    ):
        monkeypatch.setattr(f"{module}.configured_store", lambda: store)
    return store


def some_deliveries() -> dict[str, Delivery]:
    """One delivery in each of failed, delivered and queued, to dead.example and others."""
    outbox.send(
        ACTOR,
        {"type": "Create"},
        ["https://dead.example/inbox", "https://ok.example/inbox", "https://new.example/inbox"],
    )
    failed, delivered, queued = Delivery.objects.order_by("id")
    now = timezone.now()
    Delivery.objects.filter(pk=failed.pk).update(
        state=DeliveryState.FAILED, attempts=16, last_status=503, last_error="HTTP 503",
        finished_at=now - timedelta(hours=1),
    )  # fmt: skip
    Delivery.objects.filter(pk=delivered.pk).update(
        state=DeliveryState.DELIVERED, attempts=1, last_status=202, finished_at=now
    )
    Attempt.objects.create(
        delivery=failed, number=1, host="dead.example", at=now - timedelta(hours=2),
        status=503, result="retry", error="HTTP 503 <b>oops</b>",
    )  # fmt: skip
    Host.objects.create(name="dead.example", failure_days=3, last_failure_day=date.today())
    return {
        row.state: row
        for row in Delivery.objects.filter(pk__in=[failed.pk, delivered.pk, queued.pk])
    }


def staff_client(*permissions: str, name: str = "staff") -> Client:
    """A logged-in staff user with only these django_outbox permissions."""
    user = User.objects.create_user(name, password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_outbox", codename__in=permissions)
    )
    client = Client()
    client.force_login(user)
    return client


def said(response: HttpResponse) -> tuple[str, str]:
    """The last message the admin gave, as ``(level tag, text)`` (those of earlier
    responses, not shown on a page, come before it)."""
    found = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]  # type: ignore[attr-defined]
    return found[-1]

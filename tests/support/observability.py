"""Rows for the observability tests, and settings that need no Redis."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import sha256
from typing import Any

import pytest
from django.test import override_settings
from prometheus_client import CollectorRegistry, generate_latest

from django_outbox.breakers import MemoryBreakerStore
from django_outbox.counters import recording
from django_outbox.counters.shared import configured_metrics_store
from django_outbox.metrics.collectors import OutboxCollector
from django_outbox.models import Delivery, Message
from django_outbox.status.timeline import forget_ended_hours
from testproject.demo.keys import ACTOR

#: No Redis anywhere: breakers, metrics and caches in this process's memory.
NO_REDIS: dict[str, Any] = {
    "CACHES": {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    "OUTBOX_BREAKER_CACHE": None,
    "OUTBOX_METRICS_CACHE": None,
}


def exposition() -> str:
    """The outbox's metrics as a scrape reads them, the database read now."""
    own = CollectorRegistry(auto_describe=False)
    own.register(OutboxCollector())
    with override_settings(OUTBOX_METRICS_TTL=0):
        return generate_latest(own).decode()


@contextmanager
def memory_only() -> Iterator[None]:
    """Settings without Redis, and an empty in-memory metrics store."""
    with override_settings(**NO_REDIS):
        recording.flush()  # what earlier tests left pending
        configured_metrics_store().clear()
        forget_ended_hours()
        yield
        recording.flush()
        configured_metrics_store().clear()


def shared_breakers(monkeypatch: pytest.MonkeyPatch) -> MemoryBreakerStore:
    """One in-memory breaker store that the status readers see (each
    ``configured_store()`` call makes a new one without Redis)."""
    store = MemoryBreakerStore()
    for module in ("django_outbox.status.snapshot", "django_outbox.status.host_report"):
        monkeypatch.setattr(f"{module}.configured_store", lambda: store)
    return store


def message(**fields: Any) -> Message:
    """A stored message (``created_at`` and the rest as given)."""
    body = b"{}"
    values: dict[str, Any] = {"max_attempts": 16, **fields}
    return Message.objects.create(
        sender=ACTOR, body=body, body_sha256=sha256(body).digest(), **values
    )


def deliveries(
    count: int, *, host: str = "a.example", sent: dict[str, Any] | None = None, **fields: Any
) -> list[Delivery]:
    """``count`` deliveries to ``host`` with ``fields``, of a new message with ``sent``."""
    parent = message(lane=fields.get("lane", "outbox"), **(sent or {}))
    rows = [
        Delivery(message=parent, inbox=f"https://{host}/inbox/{parent.pk}/{i}", host=host, **fields)
        for i in range(count)
    ]
    return Delivery.objects.bulk_create(rows)

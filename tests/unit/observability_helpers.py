"""Rows and outcomes for the observability tests, and settings that need no Redis."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from hashlib import sha256
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_outbox.breakers import MemoryBreakerStore
from django_outbox.metrics import recording
from django_outbox.metrics.store import configured_metrics_store
from django_outbox.models import Delivery, DeliveryState, Message
from django_outbox.outcomes import AttemptResult, Outcome
from django_outbox.store.claimed import ClaimedRow, MessageData
from testproject.demo.keys import ACTOR

#: No Redis anywhere: breakers, metrics and caches in this process's memory.
NO_REDIS: dict[str, Any] = {
    "CACHES": {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
    "OUTBOX_BREAKER_CACHE": None,
    "OUTBOX_METRICS_CACHE": None,
}


@contextmanager
def memory_only() -> Iterator[None]:
    """Settings without Redis, and an empty in-memory metrics store."""
    with override_settings(**NO_REDIS):
        recording.flush()  # what earlier tests left pending
        configured_metrics_store().clear()
        yield
        recording.flush()
        configured_metrics_store().clear()


def shared_breakers(monkeypatch: pytest.MonkeyPatch) -> MemoryBreakerStore:
    """One in-memory breaker store that the status readers see (each
    ``configured_store()`` call makes a new one without Redis)."""
    store = MemoryBreakerStore()
    for module in ("django_outbox.status.snapshot", "django_outbox.status.hosts"):
        monkeypatch.setattr(f"{module}.configured_store", lambda: store)
    return store


def message(**fields: Any) -> Message:
    """A stored message (``created_at`` and the rest as given)."""
    body = b"{}"
    values: dict[str, Any] = {"max_attempts": 16, **fields}
    return Message.objects.create(
        sender=ACTOR, body=body, body_sha256=sha256(body).digest(), **values
    )


def deliveries(count: int, *, host: str = "a.example", **fields: Any) -> list[Delivery]:
    """``count`` deliveries of a new message to ``host`` with ``fields``."""
    parent = message(lane=fields.get("lane", "outbox"))
    rows = [
        Delivery(message=parent, inbox=f"https://{host}/inbox/{parent.pk}/{i}", host=host, **fields)
        for i in range(count)
    ]
    return Delivery.objects.bulk_create(rows)


def claimed(count: int, token: str = "t1", host: str = "a.example") -> list[Delivery]:
    """Deliveries being sent under ``token``, one attempt spent."""
    lease = timezone.now() + timedelta(minutes=5)
    return deliveries(
        count,
        host=host,
        state=DeliveryState.SENDING,
        claimed_by=token,
        attempts=1,
        lease_until=lease,
    )


def outcome(row: Delivery, result: AttemptResult, token: str = "t1", **details: Any) -> Outcome:
    """The outcome of an attempt at ``row``, claimed with ``token``."""
    parent = row.message
    claimed_row = ClaimedRow(
        row.pk,
        parent.pk,
        row.inbox,
        row.host,
        row.via,
        row.lane,
        row.ordering_key,
        row.attempts,
        token,
    )
    data = MessageData(
        parent.pk,
        parent.sender,
        b"{}",
        b"",
        parent.content_type,
        parent.deadline,
        parent.activity_type,
        False,
        parent.max_attempts,
        parent.created_at,
    )
    return Outcome(claimed_row, data, result, **details)

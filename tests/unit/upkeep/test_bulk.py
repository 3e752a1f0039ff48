"""Selections of any size are requeued and given up on in pages of ids."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.exceptions import InvalidSince, OutboxError
from django_outbox.models import Delivery, DeliveryState
from django_outbox.upkeep import bulk
from tests.support.observability import deliveries

pytestmark = pytest.mark.django_db


def test_requeue_takes_every_page_and_leaves_delivered_ones_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bulk, "CHUNK", 3)
    deliveries(7, state=DeliveryState.FAILED, finished_at=timezone.now())
    deliveries(2, state=DeliveryState.DELIVERED, finished_at=timezone.now())
    deliveries(1, state=DeliveryState.QUEUED)
    everything = Delivery.objects.all()
    assert bulk.count_by_state(everything) == {"failed": 7, "delivered": 2, "queued": 1}
    with CaptureQueriesContext(connection) as queries:
        assert bulk.requeue(everything) == 7
    pages = [q for q in queries if q["sql"].endswith("LIMIT 3")]
    assert len(pages) == 4  # 3 + 3 + 1, and the empty page that ends it
    assert bulk.count_by_state(everything) == {"queued": 8, "delivered": 2}
    assert bulk.requeue(everything, [*bulk.REQUEUED_STATES, "delivered"]) == 2
    assert bulk.count_by_state(everything) == {"queued": 10}


def test_give_up_takes_live_deliveries_of_the_states_named() -> None:
    deliveries(2, state=DeliveryState.QUEUED)
    deliveries(1, state=DeliveryState.WAITING)
    deliveries(1, state=DeliveryState.DELIVERED, finished_at=timezone.now())
    everything = Delivery.objects.all()
    assert bulk.give_up(everything, "gone", ["waiting", "delivered"]) == 1
    assert bulk.give_up(everything, "gone") == 2
    assert bulk.count_by_state(everything) == {"failed": 3, "delivered": 1}
    assert set(Delivery.objects.filter(state="failed").values_list("last_error", flat=True)) == {
        "gone"
    }


def test_since_is_a_duration_or_a_date() -> None:
    now = timezone.now()
    assert abs(bulk.parse_since("2h") - (now - timedelta(hours=2))) < timedelta(seconds=5)
    assert bulk.parse_since("2026-12-02T10:00:00+00:00").hour == 10
    assert timezone.is_aware(bulk.parse_since("2026-12-02 10:00"))
    for bad in ("1x", "yesterday", "2026-13-02 10:00", ""):
        with pytest.raises(InvalidSince) as raised:
            bulk.parse_since(bad)
        assert isinstance(raised.value, OutboxError) and isinstance(raised.value, ValueError)

"""The reads of queued deliveries name every lane, so that PostgreSQL takes them from
ranges of the due index (queued rows only) rather than from the whole table."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_outbox.broker.publish import forget_all_dispatches, take_undispatched
from django_outbox.models import Delivery, DeliveryState, Lane
from django_outbox.store.queries import queued
from tests.support.rows import ago, delivery, hence, message

pytestmark = pytest.mark.django_db


def test_queued_names_every_lane_and_takes_only_queued_rows() -> None:
    rows = {lane: delivery(message(lane=lane)) for lane in Lane.values}
    delivery(message(), DeliveryState.SENDING)
    delivery(message(), DeliveryState.DELIVERED)
    assert set(queued().values_list("id", flat=True)) == {row.pk for row in rows.values()}
    where = str(queued().query).split("WHERE", 1)[1]
    assert '"lane" IN' in where
    assert all(lane in where for lane in Lane.values)


def test_the_dispatch_reads_select_by_lane_and_still_take_every_lane() -> None:
    parked = {
        lane: delivery(message(lane=lane), dispatched_at=None, next_attempt_at=ago(1))
        for lane in Lane.values
    }
    later = delivery(message(), dispatched_at=None, next_attempt_at=hence(60))
    with CaptureQueriesContext(connection) as seen:
        taken = take_undispatched()
    assert {pk for ids in taken.values() for pk in ids} == {row.pk for row in parked.values()}
    assert set(taken) == set(Lane.values)
    select = next(q["sql"] for q in seen.captured_queries if q["sql"].startswith("SELECT"))
    assert '"lane" IN' in select
    with CaptureQueriesContext(connection) as seen:
        assert forget_all_dispatches() == len(Lane.values)  # the ones just marked
    assert '"lane" IN' in seen.captured_queries[-1]["sql"]
    assert Delivery.objects.get(pk=later.pk).dispatched_at is None

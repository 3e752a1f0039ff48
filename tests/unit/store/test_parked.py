"""Parked deliveries made due early: only the host's queued rows parked for the reasons
given, and not due yet, the ones due first, in one statement."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_outbox.models import Delivery, DeliveryState, Lane
from django_outbox.store.parked import release_parked
from tests.support.rows import ago, delivery, hence, message

pytestmark = pytest.mark.django_db

HOST = "parked.example"
INBOX = f"https://{HOST}/inbox"
WHY = "held: a payment to its host is under way"


def parked(seconds: float, why: str = WHY, lane: str = Lane.DEFAULT, **fields: object) -> Delivery:
    """A queued delivery to :data:`HOST`, due ``seconds`` from now, waiting for ``why``."""
    return delivery(
        message(lane=lane),
        inbox=INBOX,
        lane=lane,
        last_error=why,
        next_attempt_at=hence(seconds),
        dispatched_at=None,
        **fields,
    )


def test_the_rows_due_first_are_made_due_now_and_handed_back_by_lane() -> None:
    first = parked(10)
    second = parked(20, lane=Lane.PRIORITY)
    third = parked(30)
    with CaptureQueriesContext(connection) as seen:
        lanes = release_parked(HOST, [WHY], 2)
    assert lanes == {Lane.DEFAULT: [first.pk], Lane.PRIORITY: [second.pk]}
    assert len(seen.captured_queries) == 1
    for row in (first, second):
        row.refresh_from_db()
        assert row.next_attempt_at <= hence(0)
        assert row.dispatched_at is not None
    third.refresh_from_db()
    assert third.next_attempt_at > hence(25)
    assert third.dispatched_at is None


def test_other_hosts_reasons_states_and_rows_due_already_are_left_alone() -> None:
    other_host = delivery(message(), last_error=WHY, next_attempt_at=hence(10))
    other_reason = parked(10, why="held: something else")
    due_already = parked(-5)
    sending = parked(10, state=DeliveryState.SENDING)
    wanted = parked(10)
    assert release_parked(HOST, [WHY]) == {Lane.DEFAULT: [wanted.pk]}
    for row in (other_host, other_reason, sending):
        before = row.next_attempt_at
        row.refresh_from_db()
        assert row.next_attempt_at == before
    due_already.refresh_from_db()
    assert due_already.next_attempt_at <= ago(4)


def test_a_prefix_matches_exactly_its_text() -> None:
    """No pattern: ``%`` and ``_`` in the prefix are themselves, and case counts."""
    prefix = "held: 50%_off.example is paused"
    wanted = parked(10, why=prefix + " (by hand)")
    parked(10, why="held: 50%Xoff.example is paused")
    parked(10, why=prefix.upper())
    assert release_parked(HOST, starting=prefix) == {Lane.DEFAULT: [wanted.pk]}


def test_nothing_asked_for_makes_nothing_due() -> None:
    row = parked(10)
    with CaptureQueriesContext(connection) as seen:
        assert release_parked(HOST, [WHY], 0) == {}
        assert release_parked(HOST) == {}
    assert seen.captured_queries == []
    assert release_parked(HOST, [WHY]) == {Lane.DEFAULT: [row.pk]}
    assert release_parked(HOST, [WHY]) == {}

"""Deliveries held for their host, released early a few at a time (issue 28)."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from django_outbox.breakers.policy import hold_error
from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.holds import RELEASE_SPREAD, release_held
from django_outbox.values.outcomes import AttemptResult
from django_outbox.worker.recorder import apply_outcomes, publish_effects
from tests.support.claims import claimed, outcome

pytestmark = pytest.mark.django_db

THRESHOLD = 10


def held_rows(count: int, host: str = "a.example", why: str = "open") -> list[Delivery]:
    """``count`` queued deliveries to ``host``, held for ``why`` for another minute."""
    rows = claimed(count, host=host)
    later = timezone.now() + timedelta(seconds=60)
    Delivery.objects.filter(id__in=[row.id for row in rows]).update(
        state=DeliveryState.QUEUED,
        claimed_by="",
        lease_until=None,
        next_attempt_at=later,
        last_error=hold_error(why, THRESHOLD),
    )
    return rows


def test_a_release_makes_a_step_of_the_hosts_held_deliveries_due_within_the_spread() -> None:
    rows = held_rows(10)
    other = held_rows(3, host="b.example")
    before = timezone.now()
    released = release_held(["a.example"], THRESHOLD, 4)
    ids = sorted(pk for lanes in released.values() for pk in lanes["outbox"])
    assert len(ids) == 4
    assert all(0 <= countdown <= RELEASE_SPREAD for countdown in released)
    for row in Delivery.objects.filter(id__in=ids):
        assert before <= row.next_attempt_at <= timezone.now() + timedelta(seconds=RELEASE_SPREAD)
        assert row.dispatched_at is not None
    still = Delivery.objects.filter(id__in=[r.id for r in rows + other]).exclude(id__in=ids)
    assert all(row.next_attempt_at > timezone.now() + timedelta(seconds=50) for row in still)
    # A host named twice (two successes) gets two steps.
    assert (
        sum(len(v["outbox"]) for v in release_held(["a.example"] * 2, THRESHOLD, 2).values()) == 4
    )


def test_throttled_holds_retries_and_payment_holds_are_left_alone() -> None:
    throttled = held_rows(2, why="throttled")
    retry = held_rows(2)
    Delivery.objects.filter(id__in=[r.id for r in retry]).update(last_error="HTTP 500")
    busy = held_rows(2, why="busy")
    released = release_held(["a.example"], THRESHOLD, 10)
    ids = {pk for lanes in released.values() for pk in lanes["outbox"]}
    assert ids == {row.id for row in busy}
    assert not ids & {row.id for row in throttled + retry}


def test_the_recorder_releases_for_the_hosts_its_outcomes_freed() -> None:
    held = held_rows(6)
    (sent,) = claimed(1)
    plan = apply_outcomes(
        [outcome(sent, AttemptResult.DELIVERED, status=202, released=("a.example",))]
    )
    with mock.patch("django_outbox.worker.recorder.publish") as publish:
        publish_effects(plan)
    published = {pk for call in publish.call_args_list for pk in call.args[0].get("outbox", [])}
    assert len(published & {row.id for row in held}) == 4, "OUTBOX_RELEASE_STEP"


def test_a_row_held_again_after_it_was_read_is_left_to_its_new_hold() -> None:
    (row,) = held_rows(1)
    later = timezone.now() + timedelta(seconds=300)

    def held_again_meanwhile() -> float:  # called between the read and the row's update
        Delivery.objects.filter(id=row.id).update(next_attempt_at=later)
        return 0.5

    with mock.patch("django_outbox.store.holds.random.random", held_again_meanwhile):
        assert release_held(["a.example"], THRESHOLD, 4) == {}
    assert Delivery.objects.get(id=row.id).next_attempt_at == later

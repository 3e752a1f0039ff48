"""The attempt history: written with a batch's outcomes, bounded, pruned with its delivery."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.models import Attempt, Delivery
from django_outbox.store.pruning import prune
from django_outbox.upkeep.operations import requeue
from django_outbox.values.outcomes import AttemptResult
from django_outbox.worker.recorder import apply_outcomes
from tests.support.claims import claimed, outcome, reclaim

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_redis")]


def test_failures_and_late_successes_are_kept_first_successes_are_not() -> None:
    first_ok, failing, held, released = claimed(4)
    started = time.time() - 2
    apply_outcomes(
        [
            outcome(first_ok, AttemptResult.DELIVERED, status=202, schemes=("draft-cavage",)),
            outcome(
                failing,
                AttemptResult.RETRY,
                status=503,
                error="HTTP 503",
                retry_after=120.0,
                started_at=started,
                duration=0.25,
                schemes=("draft-cavage", "rfc9421"),
            ),
            outcome(held, AttemptResult.HELD, error="held: open", held_for=30.0),
            outcome(released, AttemptResult.RELEASED, error="released"),
        ]
    )
    rows = {row.delivery_id: row for row in Attempt.objects.all()}
    assert set(rows) == {failing.id, held.id}
    failed = rows[failing.id]
    assert (failed.number, failed.held, failed.status, failed.scheme) == (1, False, 503, "rfc9421")
    assert (failed.result, failed.error, failed.wait, failed.duration) == (
        "retry",
        "HTTP 503",
        120.0,
        0.25,
    )
    assert abs(failed.at.timestamp() - started) < 0.01
    assert failed.host == "a.example"
    hold = rows[held.id]
    assert (hold.held, hold.times, hold.wait, hold.duration, hold.result) == (
        True,
        1,
        30.0,
        None,
        "held",
    )

    later = reclaim(failing, "t2")
    apply_outcomes([outcome(later, AttemptResult.DELIVERED, status=202)])
    history = Attempt.objects.filter(delivery_id=failing.id).order_by("number")
    assert list(history.values_list("number", "result")) == [(1, "retry"), (2, "delivered")]


@override_settings(OUTBOX_MAX_ATTEMPTS=16)
def test_holds_before_an_attempt_share_one_row_and_requeued_attempts_take_old_places() -> None:
    (row,) = claimed(1, "h0")
    for n in range(5):
        # A hold gives its attempt back: the delivery is claimed again at attempt 1.
        apply_outcomes([outcome(row, AttemptResult.HELD, held_for=5.0)])
        row = reclaim(row, f"h{n + 1}")
        assert row.attempts == 1
    hold = Attempt.objects.get(delivery_id=row.id)
    assert (hold.number, hold.held, hold.times) == (1, True, 5)

    for attempt in (1, 2):
        assert row.attempts == attempt
        apply_outcomes([outcome(row, AttemptResult.RETRY, status=500)])
        row = reclaim(row, f"a{attempt}")
    assert Attempt.objects.filter(delivery_id=row.id).count() == 3
    # Requeued: attempt 1 again replaces the first attempt's row, and counts afresh.
    apply_outcomes([outcome(row, AttemptResult.REFUSED, status=410)])
    assert requeue([row.id]) == 1
    row = reclaim(row, "again")
    assert row.attempts == 1
    apply_outcomes([outcome(row, AttemptResult.RETRY, status=502)])
    assert Attempt.objects.filter(delivery_id=row.id).count() == 4
    first = Attempt.objects.get(delivery_id=row.id, number=1, held=False)
    assert (first.status, first.times) == (502, 1)


def test_one_insert_for_a_batch_of_failures() -> None:
    rows = claimed(200)
    with CaptureQueriesContext(connection) as queries:
        apply_outcomes([outcome(row, AttemptResult.RETRY, status=500) for row in rows])
    inserts = [q for q in queries if "INSERT INTO" in q["sql"] and "attempt" in q["sql"]]
    assert len(inserts) == (1 if connection.vendor == "postgresql" else 3)  # 80 rows (SQLite)
    assert Attempt.objects.count() == 200


def test_batches_without_failures_write_no_history() -> None:
    rows = claimed(50)
    with CaptureQueriesContext(connection) as queries:
        apply_outcomes([outcome(row, AttemptResult.DELIVERED, status=202) for row in rows])
    assert not [q for q in queries if "attempt" in q["sql"].lower() and "INSERT" in q["sql"]]


@override_settings(OUTBOX_RETENTION_SECONDS=60)
def test_pruning_a_delivery_removes_its_history() -> None:
    (row,) = claimed(1)
    apply_outcomes([outcome(row, AttemptResult.REFUSED, status=410, error="HTTP 410")])
    assert Attempt.objects.count() == 1
    Delivery.objects.filter(pk=row.id).update(finished_at=timezone.now() - timedelta(hours=1))
    assert prune() == 2  # the delivery and its history row
    assert not Attempt.objects.exists()

"""The recorder when saving goes wrong: the thread goes on, and every delivery gets an
outcome (its own, or an internal error) or its process is made unfit."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DataError, OperationalError
from django.test import override_settings

from django_outbox.models import Delivery, DeliveryState
from django_outbox.values.outcomes import AttemptResult, Outcome
from django_outbox.worker import recorder as recording
from django_outbox.worker.process import WorkerProcess
from django_outbox.worker.recorder import Recorder, Release, apply_outcomes
from django_outbox.worker.supervisor import Supervisor
from tests.support.claims import claimed, delivered, outcome

pytestmark = pytest.mark.django_db(transaction=True)


class Unfit:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


@pytest.fixture
def unfit() -> Unfit:
    return Unfit()


@pytest.fixture
def made(unfit: Unfit) -> Iterator[Callable[[], Recorder]]:
    made: list[Recorder] = []

    def make() -> Recorder:
        rec = Recorder(unfit=unfit)
        made.append(rec)
        return rec

    yield make
    for rec in made:
        assert rec.flush(10)


def failing_for(ids: set[int], error: Exception) -> Callable[[list[Outcome]], Any]:
    """apply_outcomes, raising ``error`` for any batch holding one of ``ids``."""

    def apply(batch: list[Outcome]) -> Any:
        if any(o.row.id in ids and o.failure != "internal" for o in batch):
            raise error
        return apply_outcomes(batch)

    return apply


def states() -> dict[int, tuple[str, str]]:
    return {r.pk: (r.state, r.last_error) for r in Delivery.objects.order_by("pk")}


def test_a_poisoned_outcome_gets_an_internal_error_and_the_rest_of_the_batch_is_saved(
    made: Callable[[], Recorder], unfit: Unfit, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = claimed(3)
    poison = ValueError("year 33715 is out of range")
    monkeypatch.setattr(recording, "apply_outcomes", failing_for({rows[1].pk}, poison))
    rec = made()
    for row in rows:
        rec.put(delivered(row))
    assert rec.flush(10)
    found = states()
    assert found[rows[0].pk] == (DeliveryState.DELIVERED, "")
    assert found[rows[2].pk] == (DeliveryState.DELIVERED, "")
    state, error = found[rows[1].pk]
    assert state == DeliveryState.QUEUED
    assert (
        error == "internal: its outcome could not be saved: ValueError: year 33715 is out of range"
    )
    assert unfit.reasons == []
    rec.put(delivered(claimed(1)[0]))  # the thread goes on
    assert rec.flush(10)


def test_a_value_no_column_can_hold_is_not_retried_as_an_outage(
    made: Callable[[], Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    (row,) = claimed(1)
    monkeypatch.setattr(recording, "apply_outcomes", failing_for({row.pk}, DataError("bigint")))
    rec = made()
    rec.put(delivered(row))
    assert rec.flush(10)
    assert states()[row.pk][1] == "internal: its outcome could not be saved: DataError: bigint"


def test_an_outcome_that_cannot_be_saved_even_as_an_error_makes_the_process_unfit(
    made: Callable[[], Recorder], unfit: Unfit, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = claimed(2)

    def broken(batch: list[Outcome]) -> Any:
        if any(o.row.id == rows[0].pk for o in batch):
            raise RuntimeError("no way")
        return apply_outcomes(batch)

    monkeypatch.setattr(recording, "apply_outcomes", broken)
    rec = made()
    rec.put(delivered(rows[0]))
    rec.put(delivered(rows[1]))
    assert rec.flush(10)
    assert unfit.reasons == [
        f"the recorder cannot save delivery {rows[0].pk}: RuntimeError('no way')"
    ]
    assert states()[rows[0].pk][0] == DeliveryState.SENDING  # given back by the unfit process
    assert states()[rows[1].pk][0] == DeliveryState.DELIVERED


def test_while_the_database_is_away_the_batch_is_tried_again(
    made: Callable[[], Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    (row,) = claimed(1)
    tries: list[int] = []

    def away_twice(batch: list[Outcome]) -> Any:
        tries.append(len(batch))
        if len(tries) < 3:
            raise OperationalError("server closed the connection")
        return apply_outcomes(batch)

    monkeypatch.setattr(recording, "apply_outcomes", away_twice)
    monkeypatch.setattr(recording.time, "sleep", lambda seconds: None)
    rec = made()
    rec.put(delivered(row))
    assert rec.flush(10)
    assert tries == [1, 1, 1]
    assert states()[row.pk][0] == DeliveryState.DELIVERED


def test_a_sender_gone_check_that_raises_or_hangs_leaves_a_retry_with_a_note() -> None:
    rows = claimed(2)
    release = threading.Event()

    def resolver(sender: str) -> None:
        return None

    def gone(sender: str) -> bool:
        release.wait(5)
        raise LookupError("purged actor")

    resolver.gone = gone  # type: ignore[attr-defined]
    retry = [outcome(r, AttemptResult.RETRY, status=401, error="HTTP 401") for r in rows]
    with override_settings(
        OUTBOX_KEY_RESOLVER=resolver, OUTBOX_SENDER_GONE_STATUSES=[401], OUTBOX_STALL_TIMEOUT=0.4
    ):
        try:
            apply_outcomes(retry)
        finally:
            release.set()
    for state, error in states().values():
        assert state == DeliveryState.QUEUED
        assert error == (
            "HTTP 401; internal: the sender-gone check failed: "
            "OUTBOX_SENDER_GONE did not answer within 0.2 s"
        )


def test_a_release_gives_back_what_a_claim_still_holds(made: Callable[[], Recorder]) -> None:
    rows = claimed(2, token="lost-claim")
    rec = made()
    rec.put(Release((rows[0].pk, rows[1].pk, 10**9), "lost-claim"))
    rec.put(Release((rows[1].pk,), "another-claim", after=30))
    assert rec.flush(10)
    for found in Delivery.objects.all():
        assert (found.state, found.attempts, found.claimed_by) == (DeliveryState.QUEUED, 0, "")


def test_abandon_takes_the_batch_being_saved_and_what_is_queued(
    made: Callable[[], Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = claimed(3)
    saving, gate = threading.Event(), threading.Event()

    def stuck(batch: list[Outcome]) -> Any:
        saving.set()
        gate.wait(5)
        return apply_outcomes(batch)

    monkeypatch.setattr(recording, "apply_outcomes", stuck)
    rec = made()
    rec.put(delivered(rows[0]))
    assert saving.wait(5)
    rec.put(delivered(rows[1]))
    rec.put(Release((rows[2].pk,), "t1"))
    taken = rec.abandon()
    assert [item.row.id if isinstance(item, Outcome) else item.ids for item in taken] == [
        rows[0].pk,
        rows[1].pk,
        (rows[2].pk,),
    ]
    assert rec.backlog() == 1  # the batch being saved; what was queued is taken out
    gate.set()


@pytest.fixture
def stuck_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[WorkerProcess, Any]]:
    """A worker process whose recorder thread is stuck in its first save (the test's
    thread saves normally); the gate ends the stuck step.

    At teardown the recorder thread is let go and waited for while the stub is still in
    place (so it writes nothing): left running, it would reach the real save during the
    database's flush, which it could block or deadlock, leaving this test's rows to the
    next."""
    gate, saving = threading.Event(), threading.Event()
    real = recording.apply_outcomes

    def stuck_on_the_recorder_thread(batch: list[Outcome]) -> Any:
        if threading.current_thread().name == "outbox-recorder":
            saving.set()
            gate.wait(10)
            raise RuntimeError("ended by the test")
        return real(batch)

    monkeypatch.setattr(recording, "apply_outcomes", stuck_on_the_recorder_thread)
    with override_settings(OUTBOX_BREAKER_CACHE=None):
        process = WorkerProcess(supervisor=Supervisor())
    yield process, saving
    gate.set()
    assert process.recorder.flush(10)


def test_an_unfit_process_saves_what_its_stuck_recorder_held(
    stuck_process: tuple[WorkerProcess, Any],
) -> None:
    """Known outcomes are saved, not given back: an inbox that accepted (perhaps with a
    paid token, which a second send would have to pay for again) is not sent it again."""
    process, saving = stuck_process
    rows = claimed(3)
    process.recorder.put(delivered(rows[0]))
    assert saving.wait(5)
    process.recorder.put(delivered(rows[1]))
    process.recorder.put(outcome(rows[2], AttemptResult.RETRY, status=503, error="HTTP 503"))
    process.stop(0.1, recorder_works=False)
    found = {row.pk: (row.state, row.claimed_by) for row in Delivery.objects.all()}
    assert found == {
        rows[0].pk: (DeliveryState.DELIVERED, ""),
        rows[1].pk: (DeliveryState.DELIVERED, ""),
        rows[2].pk: (DeliveryState.QUEUED, ""),
    }


def test_what_an_unfit_process_cannot_save_is_given_back(
    stuck_process: tuple[WorkerProcess, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    process, saving = stuck_process
    rows = claimed(2)
    process.recorder.put(delivered(rows[0]))
    assert saving.wait(5)
    process.recorder.put(delivered(rows[1]))

    def broken(batch: list[Outcome | Release]) -> None:
        raise RuntimeError("the save is broken too")

    monkeypatch.setattr(process.recorder, "save_here", broken)
    process.stop(0.1, recorder_works=False)
    for row in Delivery.objects.all():
        assert (row.state, row.attempts, row.claimed_by) == (DeliveryState.QUEUED, 0, "")

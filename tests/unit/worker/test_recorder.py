"""The recorder: how it gathers outcomes into batches, and what saving a batch does."""

from __future__ import annotations

import threading
import time
from datetime import date, timedelta
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django.dispatch import Signal
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState, Host
from django_outbox.signals import delivery_attempted, delivery_failed, delivery_settled
from django_outbox.values.outcomes import AttemptResult, Outcome
from django_outbox.worker.recorder import Recorder, apply_outcomes
from testproject.demo.keys import ACTOR
from tests.support.claims import claimed, delivered, outcome
from tests.support.rows import claimed_row

SIGNALS = {"attempted": delivery_attempted, "settled": delivery_settled, "failed": delivery_failed}
#: The keyword arguments of each signal, as signals.py and docs/signals.md list them.
DOCUMENTED = {
    "attempted": {"delivery", "inbox", "actor", "status", "error", "held", "outcome"},
    "settled": {"delivery", "inbox", "actor", "tag", "outcome", "status", "amount_msat"},
    "failed": {"delivery", "inbox", "actor", "status", "error", "tag", "deadline"},
}


def updates(queries: CaptureQueriesContext) -> list[str]:
    """The UPDATEs of deliveries among ``queries``."""
    table = connection.ops.quote_name(Delivery._meta.db_table)
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith(f"UPDATE {table}")]


# -- gathering ----------------------------------------------------------------------


class _Saved:
    """Stands in for apply_outcomes: remembers each batch and when it came."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.times: list[float] = []
        self.event = threading.Event()

    def __call__(self, batch: list[Outcome]) -> Any:
        self.batches.append([o.row.id for o in batch])
        self.times.append(time.monotonic())
        self.event.set()
        return mock.Mock()


def recorder(saved: _Saved, **limits: float) -> Recorder:
    patcher = mock.patch("django_outbox.worker.recorder.apply_outcomes", saved)
    patcher.start()
    made = Recorder()
    for name, value in limits.items():
        setattr(made, name, value)
    return made


@pytest.fixture
def saved() -> Any:
    tracking = _Saved()
    yield tracking
    mock.patch.stopall()


def test_outcomes_put_within_the_window_are_saved_in_one_batch(saved: _Saved) -> None:
    """Gaps of 20 ms, ten times the old 2 ms cut-off, do not split a batch."""
    rec = recorder(saved, WINDOW=30.0)
    for i in range(5):
        rec.put(outcome(i, AttemptResult.DELIVERED, "t"))
        time.sleep(0.02)
    assert not saved.batches  # still gathering
    assert rec.flush(5)
    assert saved.batches == [[0, 1, 2, 3, 4]]


def test_a_lone_outcome_waits_no_longer_than_the_window(saved: _Saved) -> None:
    rec = recorder(saved, WINDOW=0.05)
    put_at = time.monotonic()
    rec.put(outcome(1, AttemptResult.DELIVERED, "t"))
    assert saved.event.wait(5)
    assert 0.04 <= saved.times[0] - put_at < 1.0


def test_a_batch_stops_at_batch_outcomes(saved: _Saved) -> None:
    rec = recorder(saved, WINDOW=0.5, BATCH=3)
    for i in range(7):
        rec.put(outcome(i, AttemptResult.DELIVERED, "t"))
    assert rec.flush(5)
    assert saved.batches == [[0, 1, 2], [3, 4, 5], [6]]


def test_flush_cuts_the_window_short(saved: _Saved) -> None:
    rec = recorder(saved, WINDOW=30.0)
    rec.put(outcome(1, AttemptResult.DELIVERED, "t"))
    time.sleep(0.05)  # the recorder is waiting for more
    started = time.monotonic()
    assert rec.flush(5)
    assert time.monotonic() - started < 1.0
    assert saved.batches == [[1]]
    assert rec.flush(0.1)  # nothing pending: at once
    # After a flush, a new batch gathers for the whole window again.
    rec.put(outcome(2, AttemptResult.DELIVERED, "t"))
    time.sleep(0.1)
    rec.put(outcome(3, AttemptResult.DELIVERED, "t"))
    time.sleep(0.1)
    assert saved.batches == [[1]]
    assert rec.flush(5)
    assert saved.batches == [[1], [2, 3]]


def test_flush_returns_false_when_saving_outlasts_the_timeout(saved: _Saved) -> None:
    release = threading.Event()

    def slow(batch: list[Outcome]) -> Any:
        release.wait(5)
        return saved(batch)

    rec = recorder(saved)
    mock.patch("django_outbox.worker.recorder.apply_outcomes", slow).start()
    rec.put(outcome(1, AttemptResult.DELIVERED, "t"))
    assert not rec.flush(0.1)
    release.set()
    assert rec.flush(5)


# -- saving -------------------------------------------------------------------------


@pytest.mark.django_db
def test_one_update_saves_outcomes_of_several_claims_and_skips_a_stale_one() -> None:
    first, second = claimed(2, token="t1"), claimed(2, token="t2")
    stale = outcome(second[1], AttemptResult.DELIVERED, "lost", status=202)
    outcomes = [delivered(first[0]), delivered(first[1]), delivered(second[0], "t2"), stale]
    with CaptureQueriesContext(connection) as queries:
        apply_outcomes(outcomes)
    assert len(updates(queries)) == 1
    states = dict(Delivery.objects.values_list("id", "state"))
    assert [states[r.pk] for r in (*first, *second)] == ["delivered"] * 3 + ["sending"]
    row = Delivery.objects.get(pk=first[0].pk)
    assert (row.claimed_by, row.lease_until, row.last_status) == ("", None, 202)
    assert row.finished_at is not None


@pytest.mark.django_db
def test_schemes_learnt_reach_the_shared_cache_before_the_deliveries_are_saved() -> None:
    from django.core.cache import caches

    from django_outbox.conf import conf
    from django_outbox.signing import Scheme
    from django_outbox.signing.schemes import share

    rows = claimed(1)
    cache = caches[conf.SCHEME_CACHE]
    key = "django_outbox:scheme:https://a.example"
    cache.delete(key)
    share("https://a.example", Scheme.RFC9421)
    seen: list[tuple[str, str]] = []

    def settled(**kwargs: Any) -> None:
        seen.append((Delivery.objects.get(pk=rows[0].pk).state, cache.get(key)))

    delivery_settled.connect(settled)
    try:
        apply_outcomes([delivered(rows[0])])
    finally:
        delivery_settled.disconnect(settled)
    assert seen == [(DeliveryState.SENDING, Scheme.RFC9421.value)]


@pytest.mark.django_db
def test_retries_keep_each_their_own_time_in_one_update() -> None:
    rows = claimed(3)
    outcomes = [outcome(r, AttemptResult.RETRY, "t1", status=503, error="HTTP 503") for r in rows]
    with (
        mock.patch("django_outbox.destinations.backoff.jittered", side_effect=[30.0, 40.0, 50.0]),
        CaptureQueriesContext(connection) as queries,
    ):
        before = timezone.now()
        apply_outcomes(outcomes)
    assert len(updates(queries)) == 1
    saved = {r.pk: r for r in Delivery.objects.all()}
    times = [saved[r.pk].next_attempt_at for r in rows]
    assert [(t - times[0]).total_seconds() for t in times] == [0.0, 10.0, 20.0]
    assert 29 < (times[0] - before).total_seconds() < 31
    assert {(r.state, r.attempts, r.claimed_by, r.last_error) for r in saved.values()} == {
        ("queued", 1, "", "HTTP 503")
    }
    assert Host.objects.get().name == "a.example"  # a 503 is a failure day


@pytest.mark.django_db
def test_a_second_outcome_for_one_delivery_in_a_batch_is_ignored() -> None:
    (row,) = claimed(1)
    retry = outcome(row, AttemptResult.RETRY, "t1", status=500)
    apply_outcomes([delivered(row), retry])
    saved = Delivery.objects.get()
    assert (saved.state, saved.last_status) == ("delivered", 202)
    assert not Host.objects.exists()


def receivers_log() -> tuple[list[tuple[str, dict[str, Any]]], list[Any]]:
    """Connect a receiver to each signal; returns what they saw and how to disconnect."""
    seen: list[tuple[str, dict[str, Any]]] = []
    connected: list[Any] = []
    for name, signal in SIGNALS.items():

        def remember(sender: type, name: str = name, **kwargs: Any) -> None:
            assert sender is Delivery
            kwargs.pop("signal")
            # Sent before the save: the table still says "sending".
            kwargs["stored_state"] = Delivery.objects.get(pk=kwargs["delivery"].pk).state
            seen.append((name, kwargs))

        signal.connect(remember, weak=False, dispatch_uid=f"test-{name}")
        connected.append((signal, f"test-{name}"))
    return seen, connected


def disconnect(connected: list[tuple[Signal, str]]) -> None:
    for signal, uid in connected:
        signal.disconnect(dispatch_uid=uid)


@pytest.mark.django_db
def test_receivers_get_every_documented_argument() -> None:
    ok, gone, last, held, released = claimed(5, tag="tagged", max_attempts=1)
    outcomes = [
        delivered(ok),
        outcome(gone, AttemptResult.REFUSED, "t1", status=410, error="HTTP 410"),
        outcome(last, AttemptResult.RETRY, "t1", status=503, error="HTTP 503"),
        outcome(held, AttemptResult.HELD, "t1", held_for=5.0, error="breaker open"),
        outcome(released, AttemptResult.RELEASED, "t1", error="released"),
    ]
    seen, connected = receivers_log()
    try:
        apply_outcomes(outcomes)
    finally:
        disconnect(connected)
    assert [(name, kw["delivery"].pk) for name, kw in seen] == [
        ("attempted", ok.pk),
        ("settled", ok.pk),
        ("attempted", gone.pk),
        ("settled", gone.pk),
        ("failed", gone.pk),
        ("attempted", last.pk),
        ("failed", last.pk),
        ("attempted", held.pk),
    ]
    for name, kwargs in seen:
        assert set(kwargs) - {"stored_state"} == DOCUMENTED[name]
        assert kwargs["stored_state"] == "sending"
        assert kwargs["actor"] == ACTOR
        assert kwargs["inbox"] == kwargs["delivery"].inbox
    by = {(name, kw["delivery"].pk): kw for name, kw in seen}
    attempted = by[("attempted", ok.pk)]
    assert (attempted["status"], attempted["error"], attempted["held"]) == (202, "", False)
    assert attempted["outcome"] == "delivered"
    assert attempted["delivery"].state == "delivered"
    settled = by[("settled", gone.pk)]
    assert (settled["tag"], settled["outcome"], settled["status"]) == ("tagged", "refused", 410)
    failed = by[("failed", gone.pk)]
    assert (failed["status"], failed["error"], failed["tag"], failed["deadline"]) == (
        410,
        "HTTP 410",
        "tagged",
        False,
    )
    given_up = by[("failed", last.pk)]
    assert given_up["error"] == "gave up after 1 attempts: HTTP 503"
    assert (given_up["status"], given_up["delivery"].state) == (503, "failed")
    assert by[("attempted", last.pk)]["outcome"] == "retry"
    holding = by[("attempted", held.pk)]
    assert (holding["held"], holding["outcome"], holding["status"]) == (True, "held", None)
    assert (holding["delivery"].state, holding["delivery"].attempts) == ("queued", 0)
    # The row comes with its message, as before: reading the tag costs no query.
    with CaptureQueriesContext(connection) as queries:
        assert attempted["delivery"].message.tag == "tagged"
    assert not queries.captured_queries


@pytest.mark.django_db
def test_without_receivers_no_row_is_loaded_for_signals() -> None:
    rows = claimed(3)
    with mock.patch("django_outbox.signals.sending.full_rows") as full_rows:
        apply_outcomes([delivered(r) for r in rows])
    full_rows.assert_not_called()
    assert set(Delivery.objects.values_list("state", flat=True)) == {"delivered"}


@pytest.mark.django_db
def test_a_failed_receiver_alone_loads_only_the_failed_rows() -> None:
    ok, gone = claimed(2)
    delivery_failed.connect(lambda sender, **kw: None, weak=False, dispatch_uid="test-failed")
    try:
        with mock.patch(
            "django_outbox.signals.sending.full_rows", wraps=lambda ids: {}
        ) as full_rows:
            apply_outcomes([delivered(ok), outcome(gone, AttemptResult.REFUSED, "t1", status=410)])
    finally:
        delivery_failed.disconnect(dispatch_uid="test-failed")
    full_rows.assert_called_once_with([gone.pk])


# -- hosts --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("receiver", [False, True], ids=["no receivers", "an attempted receiver"])
def test_a_success_clears_a_host_row_another_connection_wrote(receiver: bool) -> None:
    healthy, failing = claimed(1, host="ok.example"), claimed(1, host="bad.example")

    def other_process() -> None:
        try:
            Host.objects.create(name="bad.example", last_failure_day=date.today())
        finally:
            connection.close()

    writer = threading.Thread(target=other_process)
    writer.start()
    writer.join()
    if receiver:
        delivery_attempted.connect(lambda sender, **kw: None, weak=False, dispatch_uid="test-a")
    try:
        with CaptureQueriesContext(connection) as queries:
            apply_outcomes([delivered(healthy[0])])
        deletes = [q for q in queries.captured_queries if q["sql"].startswith("DELETE")]
        # A batch of healthy hosts only reads whether they fail, receivers or not.
        assert not deletes
        assert Host.objects.filter(name="bad.example").exists()
        apply_outcomes([delivered(failing[0])])
    finally:
        delivery_attempted.disconnect(dispatch_uid="test-a")
    assert not Host.objects.exists()


@pytest.mark.django_db
def test_release_and_park_give_back_rows_of_several_claims_and_leave_a_stale_one() -> None:
    from django_outbox.store.transitions import park, release

    first, second = claimed(2, token="t1"), claimed(2, token="t2")
    rows = [claimed_row(r, "t1") for r in first] + [claimed_row(r, "t2") for r in second]
    stale = claimed_row(second[1], "lost")
    release([rows[0], rows[2]])
    due = [timezone.now() + timedelta(seconds=s) for s in (30, 60)]
    park([(rows[1], due[0]), (stale, due[1])], "held: test")
    saved = {r.pk: r for r in Delivery.objects.all()}
    released = [saved[r.id] for r in (rows[0], rows[2])]
    assert {(r.state, r.attempts, r.claimed_by, r.dispatched_at is not None) for r in released} == {
        ("queued", 0, "", True)
    }
    parked = saved[rows[1].id]
    assert (parked.state, parked.attempts, parked.last_error) == ("queued", 0, "held: test")
    assert (parked.next_attempt_at, parked.dispatched_at) == (due[0], None)
    assert (saved[stale.id].state, saved[stale.id].claimed_by) == ("sending", "t2")

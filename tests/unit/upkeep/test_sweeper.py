"""Each step of the sweeper, from the rows it finds to the rows it leaves and what it publishes."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

from django_outbox.models import Delivery, DeliveryState, Heartbeat, HostPause, Lane, Message
from django_outbox.signals import delivery_failed
from django_outbox.store.pruning import prune
from django_outbox.upkeep import sweeper
from tests.support.broker import RecordingApp
from tests.support.rows import ago, delivery, hence, message

pytestmark = pytest.mark.django_db

QUEUED, WAITING, SENDING = DeliveryState.QUEUED, DeliveryState.WAITING, DeliveryState.SENDING
DELIVERED, FAILED = DeliveryState.DELIVERED, DeliveryState.FAILED
#: Longer than the default ``OUTBOX_REDISPATCH_AFTER`` (15 minutes).
LONG_AGO = 3600


@pytest.fixture
def failed_signals() -> Iterator[list[dict[str, Any]]]:
    """The keyword arguments of each ``delivery_failed`` sent during the test."""
    seen: list[dict[str, Any]] = []

    def receive(sender: type, **kwargs: Any) -> None:
        seen.append(kwargs)

    delivery_failed.connect(receive, weak=False, dispatch_uid="test-sweeper")
    try:
        yield seen
    finally:
        delivery_failed.disconnect(dispatch_uid="test-sweeper")


def states(*rows: Delivery) -> list[str]:
    """The stored state of each of ``rows``."""
    stored = dict(Delivery.objects.values_list("id", "state"))
    return [stored[row.pk] for row in rows]


def published(broker: RecordingApp) -> dict[str, set[int]]:
    """The ids published in ``deliver`` messages, by lane."""
    return {lane: set(ids) for lane, ids in broker.lanes().items()}


# -- fail_expired --------------------------------------------------------------------


def test_fail_expired_gives_up_queued_and_waiting_deliveries_past_their_deadline(
    failed_signals: list[dict[str, Any]], broker: RecordingApp
) -> None:
    late = message(deadline=ago(1), ordering_key="note-1", tag="late")
    queued = delivery(late, QUEUED)
    waiting = delivery(late, WAITING)
    # A claimed one is left to its worker, which expires it when it looks.
    sending = delivery(late, SENDING, attempts=1, claimed_by="w:1:1", lease_until=hence(60))
    in_time = delivery(message(deadline=hence(60)), QUEUED)
    no_deadline = delivery(message(), QUEUED)

    assert sweeper.fail_expired() == 2

    assert states(queued, waiting, sending, in_time, no_deadline) == [
        FAILED,
        FAILED,
        SENDING,
        QUEUED,
        QUEUED,
    ]
    for row in Delivery.objects.filter(state=FAILED):
        assert row.deadline_reached
        assert row.last_error == "the batch's deadline passed before it was sent"
        assert row.finished_at is not None
    assert sorted(kw["delivery"].pk for kw in failed_signals) == [queued.pk, waiting.pk]
    assert {(kw["deadline"], kw["tag"]) for kw in failed_signals} == {(True, "late")}
    assert broker.sent == []
    assert sweeper.fail_expired() == 0


def test_fail_expired_queues_the_delivery_waiting_behind_an_expired_one(
    broker: RecordingApp,
) -> None:
    inbox = "https://ordered.example/inbox"
    expired = delivery(message(deadline=ago(1), ordering_key="note-2"), QUEUED, inbox=inbox)
    behind = delivery(message(ordering_key="note-2", lane=Lane.PRIORITY), WAITING, inbox=inbox)

    assert sweeper.fail_expired() == 1

    assert states(expired, behind) == [FAILED, QUEUED]
    assert published(broker) == {Lane.PRIORITY: {behind.pk}}


# -- reclaim_lapsed ------------------------------------------------------------------


def test_reclaim_lapsed_queues_again_and_fails_those_with_no_attempt_left(
    failed_signals: list[dict[str, Any]], broker: RecordingApp
) -> None:
    three = message(max_attempts=3)
    lapsed = delivery(three, SENDING, attempts=1, claimed_by="dead:1:1", lease_until=ago(1))
    spent = delivery(three, SENDING, attempts=3, claimed_by="dead:1:2", lease_until=ago(1))
    leased = delivery(three, SENDING, attempts=1, claimed_by="alive:2:1", lease_until=hence(60))
    urgent = message(lane=Lane.PRIORITY)
    lapsed_urgent = delivery(urgent, SENDING, attempts=2, claimed_by="dead:1:3", lease_until=ago(5))

    assert sweeper.reclaim_lapsed() == 3

    assert states(lapsed, spent, leased, lapsed_urgent) == [QUEUED, FAILED, SENDING, QUEUED]
    again = Delivery.objects.get(pk=lapsed.pk)
    assert (again.claimed_by, again.lease_until, again.attempts) == ("", None, 1)
    assert again.last_error == "the worker's lease lapsed before it reported back"
    assert again.dispatched_at is not None
    given_up = Delivery.objects.get(pk=spent.pk)
    assert given_up.last_error == "the worker was lost during every attempt"
    assert (given_up.claimed_by, given_up.deadline_reached) == ("", False)
    assert [kw["delivery"].pk for kw in failed_signals] == [spent.pk]
    assert published(broker) == {Lane.DEFAULT: {lapsed.pk}, Lane.PRIORITY: {lapsed_urgent.pk}}
    assert Delivery.objects.get(pk=leased.pk).claimed_by == "alive:2:1"


# -- dispatch_due --------------------------------------------------------------------


def test_dispatch_due_publishes_parked_and_lost_deliveries_once(broker: RecordingApp) -> None:
    parent = message()
    parked = delivery(parent, QUEUED, next_attempt_at=ago(5), dispatched_at=None)
    lost = delivery(parent, QUEUED, next_attempt_at=ago(LONG_AGO), dispatched_at=ago(LONG_AGO))
    on_its_way = delivery(parent, QUEUED, next_attempt_at=ago(5), dispatched_at=ago(10))
    not_due = delivery(parent, QUEUED, next_attempt_at=hence(60), dispatched_at=None)
    settled = delivery(parent, DELIVERED, dispatched_at=None, finished_at=ago(5))
    urgent = delivery(message(lane=Lane.PRIORITY), QUEUED, dispatched_at=None)

    assert sweeper.dispatch_due() == 3

    # In ascending order, as every dispatch publishes.
    assert broker.lanes() == {Lane.DEFAULT: [parked.pk, lost.pk], Lane.PRIORITY: [urgent.pk]}
    marked = dict(Delivery.objects.values_list("id", "dispatched_at"))
    for row in (parked, lost, urgent):
        assert marked[row.pk] is not None and marked[row.pk] > ago(5)
    assert marked[not_due.pk] is None and marked[settled.pk] is None
    assert marked[on_its_way.pk] == on_its_way.dispatched_at
    broker.clear()
    assert sweeper.dispatch_due() == 0
    assert broker.sent == []


def test_deliveries_the_broker_refused_are_dispatched_at_the_next_sweep(
    broker: RecordingApp, caplog: pytest.LogCaptureFixture
) -> None:
    row = delivery(message(), QUEUED, dispatched_at=None)
    broker.down = True
    with caplog.at_level(logging.WARNING, logger="django_outbox.dispatch"):
        assert sweeper.dispatch_due() == 1
    assert "could not publish 1 deliveries" in caplog.text
    assert Delivery.objects.get(pk=row.pk).dispatched_at is None
    broker.down = False
    assert sweeper.dispatch_due() == 1
    assert broker.lanes() == {Lane.DEFAULT: [row.pk]}


# -- expand_lost ---------------------------------------------------------------------


def test_expand_lost_starts_again_the_expansions_older_than_the_redispatch_time(
    broker: RecordingApp,
) -> None:
    pending = "https://a.example/inbox\nhttps://b.example/inbox"
    stuck = message(pending_inboxes=pending, created_at=ago(LONG_AGO))
    stuck_urgent = message(pending_inboxes=pending, created_at=ago(LONG_AGO), lane=Lane.PRIORITY)
    message(pending_inboxes=pending, created_at=ago(5))  # its expand task may still run
    message(created_at=ago(LONG_AGO))  # expanded

    assert sweeper.expand_lost() == 2

    assert sorted((p.args[0], p.queue) for p in broker.sent) == [
        (stuck.pk, Lane.DEFAULT),
        (stuck_urgent.pk, Lane.PRIORITY),
    ]
    with override_settings(OUTBOX_REDISPATCH_AFTER=2 * LONG_AGO):
        broker.clear()
        assert sweeper.expand_lost() == 0


# -- free_waiting --------------------------------------------------------------------


def test_free_waiting_queues_the_first_delivery_left_waiting_with_nothing_before_it(
    broker: RecordingApp,
) -> None:
    key, left, right = "note-3", "https://left.example/inbox", "https://right.example/inbox"
    first, second, third = (message(ordering_key=key) for _ in range(3))
    delivery(first, DELIVERED, inbox=left, finished_at=ago(5))
    stranded = delivery(second, WAITING, inbox=left)
    next_in_line = delivery(third, WAITING, inbox=left)
    delivery(first, QUEUED, inbox=right)
    blocked = delivery(second, WAITING, inbox=right)

    assert sweeper.free_waiting() == 1

    assert states(stranded, next_in_line, blocked) == [QUEUED, WAITING, WAITING]
    assert broker.lanes() == {Lane.DEFAULT: [stranded.pk]}
    assert Delivery.objects.get(pk=stranded.pk).dispatched_at is not None
    broker.clear()
    assert sweeper.free_waiting() == 0


# -- prune ---------------------------------------------------------------------------


@override_settings(OUTBOX_RETENTION_SECONDS=LONG_AGO)
def test_prune_deletes_old_finished_deliveries_and_then_their_messages() -> None:
    gone = message(created_at=ago(2 * LONG_AGO))
    old_rows = [
        delivery(gone, state, finished_at=ago(LONG_AGO + 60))
        for state in (DeliveryState.DELIVERED, DeliveryState.REFUSED, DeliveryState.SKIPPED)
    ]
    half = message(created_at=ago(2 * LONG_AGO))
    old_failed = delivery(half, FAILED, finished_at=ago(LONG_AGO + 60))
    still_live = delivery(half, QUEUED, created_at=ago(2 * LONG_AGO))
    recent = message(created_at=ago(2 * LONG_AGO))
    young = delivery(recent, DELIVERED, finished_at=ago(LONG_AGO - 60))
    unexpanded = message(created_at=ago(2 * LONG_AGO), pending_inboxes="https://a.example/inbox")
    emptied = message(created_at=ago(2 * LONG_AGO))  # its deliveries pruned before
    fresh = message()

    assert prune() == 4

    assert not Delivery.objects.filter(pk__in=[r.pk for r in [*old_rows, old_failed]]).exists()
    assert set(Delivery.objects.values_list("id", flat=True)) == {still_live.pk, young.pk}
    assert set(Message.objects.values_list("id", flat=True)) == {
        half.pk,
        recent.pk,
        unexpanded.pk,
        fresh.pk,
    }
    assert not Message.objects.filter(pk__in=[gone.pk, emptied.pk]).exists()
    assert prune() == 0


@override_settings(OUTBOX_RETENTION_SECONDS=LONG_AGO)
def test_prune_deletes_batch_after_batch_within_its_share_of_the_sweep_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("django_outbox.store.pruning.STEP", 2)
    batches: list[int] = []
    counted = SimpleNamespace(atomic=lambda: _counted(batches, transaction.atomic()))
    monkeypatch.setattr("django_outbox.store.pruning.transaction", counted)
    parents = [message(created_at=ago(2 * LONG_AGO)) for _ in range(5)]
    for parent in parents:
        delivery(parent, DELIVERED, finished_at=ago(LONG_AGO + 60))
    pauses: list[float] = []
    # The pruning module's own clock, not the time module: other threads of this
    # process (a worker fixture's) sleep meanwhile, and are not the prune's pauses.
    clock = SimpleNamespace(monotonic=time.monotonic, sleep=pauses.append)
    monkeypatch.setattr("django_outbox.store.pruning.time", clock)
    assert [prune(), Delivery.objects.count(), Message.objects.count()] == [5, 0, 0]
    assert len(batches) == 3  # 2 + 2 + 1 deliveries, a transaction each
    assert len(pauses) == 2 and all(pause >= 0 for pause in pauses)  # none after the last


@override_settings(OUTBOX_RETENTION_SECONDS=LONG_AGO, OUTBOX_SWEEP_INTERVAL=0)
def test_prune_with_no_time_left_deletes_one_batch_per_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("django_outbox.store.pruning.STEP", 2)
    parent = message(created_at=ago(2 * LONG_AGO))
    for _ in range(3):
        delivery(parent, DELIVERED, finished_at=ago(LONG_AGO + 60))
    assert [prune(), Delivery.objects.count(), Message.objects.count()] == [2, 1, 1]
    assert [prune(), Delivery.objects.count(), Message.objects.count()] == [1, 0, 0]


@override_settings(OUTBOX_RETENTION_SECONDS=LONG_AGO)
def test_prune_takes_the_longest_finished_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("django_outbox.store.pruning.STEP", 1)
    monkeypatch.setattr("django_outbox.store.pruning.SHARE", 0)
    parent = message(created_at=ago(2 * LONG_AGO))
    newer = delivery(parent, DELIVERED, finished_at=ago(LONG_AGO + 60))
    older = delivery(parent, FAILED, finished_at=ago(LONG_AGO + 600))
    assert prune() == 1
    assert list(Delivery.objects.values_list("id", flat=True)) == [newer.pk]
    assert older.pk != newer.pk


@contextmanager
def _counted(seen: list[int], block: Any) -> Iterator[None]:
    """``block``, noting in ``seen`` that it was entered."""
    seen.append(1)
    with block:
        yield


# -- the whole pass ------------------------------------------------------------------


@override_settings(OUTBOX_RETENTION_SECONDS=LONG_AGO)
def test_a_sweep_runs_every_step_and_says_what_each_touched(
    broker: RecordingApp, caplog: pytest.LogCaptureFixture
) -> None:
    expired = delivery(message(deadline=ago(1)), QUEUED)
    lapsed = delivery(message(), SENDING, attempts=1, claimed_by="dead:1:1", lease_until=ago(1))
    parked = delivery(message(), QUEUED, dispatched_at=None)
    message(pending_inboxes="https://a.example/inbox", created_at=ago(LONG_AGO))
    inbox = "https://ordered.example/inbox"
    delivery(message(ordering_key="note-4"), DELIVERED, inbox=inbox, finished_at=ago(5))
    stranded = delivery(message(ordering_key="note-4"), WAITING, inbox=inbox)
    old = delivery(message(created_at=ago(2 * LONG_AGO)), DELIVERED, finished_at=ago(2 * LONG_AGO))
    delivery(message(), FAILED, finished_at=ago(60), failed_signal_pending=True)
    Heartbeat.objects.create(name="gone:1:0", beat_at=ago(2 * LONG_AGO))
    Heartbeat.objects.create(name="alive:1:0", beat_at=ago(1))
    HostPause.objects.create(name="ended.example", until=ago(61))  # a slow start ago
    HostPause.objects.create(name="paused.example")

    with caplog.at_level(logging.INFO, logger="django_outbox.sweeper"):
        counts = sweeper.sweep()

    assert counts == {
        "expired": 1,
        "reclaimed": 1,
        "dispatched": 1,
        "expanded": 1,
        "freed": 1,
        "signals": 1,
        "pruned": 1,
        "pruned_heartbeats": 1,
        "pauses_ended": 1,
    }
    assert list(HostPause.objects.values_list("name", flat=True)) == ["paused.example"]
    assert "sweep: " in caplog.text
    assert states(expired, lapsed, parked, stranded) == [FAILED, QUEUED, QUEUED, QUEUED]
    assert not Delivery.objects.filter(pk=old.pk).exists()
    assert list(Heartbeat.objects.values_list("name", flat=True)) == ["alive:1:0"]
    assert published(broker) == {Lane.DEFAULT: {lapsed.pk, parked.pk, stranded.pk}}


def test_a_sweep_step_that_raises_leaves_the_others_to_run(
    broker: RecordingApp, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unreadable() -> int:
        raise OSError("the macaroon file is gone after a rotation")

    monkeypatch.setattr(sweeper, "free_waiting", unreadable)
    monkeypatch.setattr(sweeper, "fail_expired", unreadable)
    parked = delivery(message(), QUEUED, dispatched_at=None)
    Heartbeat.objects.create(name="gone:1:0", beat_at=ago(2 * LONG_AGO))
    with caplog.at_level(logging.WARNING):
        counts = sweeper.sweep()
    assert (counts["expired"], counts["freed"]) == (0, 0)
    assert (counts["dispatched"], counts["pruned_heartbeats"]) == (1, 1)
    assert "sweep step 'freed' failed: OSError" in caplog.text
    assert published(broker) == {Lane.DEFAULT: {parked.pk}}

"""The leader's recovery pass: dead owners' claims, a lost broker, give-up signals."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_outbox.broker.publish import CANARY_QUEUE, publish, use_publisher
from django_outbox.conf import conf
from django_outbox.models import Delivery, DeliveryState, Heartbeat, Lane
from django_outbox.signals import delivery_failed
from django_outbox.store import give_ups, heartbeats
from django_outbox.upkeep import operations, recovery_pass
from tests.support.broker import MemoryBroker
from tests.support.clocks import FakeClock
from tests.support.rows import ago, delivery, hence, message

pytestmark = pytest.mark.django_db

QUEUED, SENDING, FAILED = DeliveryState.QUEUED, DeliveryState.SENDING, DeliveryState.FAILED
#: Default lease (300 s) minus the default heartbeat timeout (15 s): a claim whose
#: lease ends sooner than this from now was made more than a timeout ago.
OLD_CLAIM = 280
HEARTBEAT_TIMEOUT = conf.HEARTBEAT_TIMEOUT
now = timezone.now


@pytest.fixture
def memory_broker() -> Iterator[MemoryBroker]:
    """The broker the package publishes to during the test, in memory."""
    memory = MemoryBroker()
    with use_publisher(memory):
        yield memory


@pytest.fixture
def failed_signals() -> Iterator[list[int]]:
    """The delivery ids of each ``delivery_failed`` sent during the test."""
    seen: list[int] = []

    def receive(sender: type, **kwargs: Any) -> None:
        seen.append(kwargs["delivery"].pk)

    delivery_failed.connect(receive, weak=False, dispatch_uid="test-recovery")
    try:
        yield seen
    finally:
        delivery_failed.disconnect(dispatch_uid="test-recovery")


def claimed_by_owner(owner: str, lease_from_now: float = OLD_CLAIM, **fields: Any) -> Delivery:
    """A delivery claimed by ``owner`` (a heartbeat name), its lease ending so far ahead."""
    return delivery(
        fields.pop("parent", None) or message(),
        SENDING,
        attempts=fields.pop("attempts", 1),
        claimed_by=f"{owner}:7",
        lease_until=hence(lease_from_now),
        **fields,
    )


def state_of(row: Delivery) -> str:
    return Delivery.objects.get(pk=row.pk).state


# -- dead owners -------------------------------------------------------------------


def test_claims_of_a_dead_owner_are_taken_back_and_a_live_owners_kept(
    memory_broker: MemoryBroker, failed_signals: list[int]
) -> None:
    heartbeats.beat("live:1:aaaaaaaaaaaa")
    Heartbeat.objects.create(name="dead:2:bbbbbbbbbbbb", beat_at=ago(16))
    kept = claimed_by_owner("live:1:aaaaaaaaaaaa", lease_from_now=1)  # however old the claim
    taken = claimed_by_owner("dead:2:bbbbbbbbbbbb")
    unknown = claimed_by_owner("gone:3:cccccccccccc")  # no row: an older version's, or pruned
    young = claimed_by_owner("gone:3:cccccccccccc", lease_from_now=295)  # claimed 5 s ago
    spent = claimed_by_owner("dead:2:bbbbbbbbbbbb", parent=message(max_attempts=2), attempts=2)

    assert recovery_pass.reclaim_dead() == 3

    assert [state_of(row) for row in (kept, taken, unknown, young, spent)] == [
        SENDING,
        QUEUED,
        QUEUED,
        SENDING,
        FAILED,
    ]
    again = Delivery.objects.get(pk=taken.pk)
    assert (again.attempts, again.claimed_by, again.lease_until) == (1, "", None)
    assert again.last_error == "its worker stopped beating before it reported back"
    assert Delivery.objects.get(pk=spent.pk).last_error == operations.LOST_EVERY_ATTEMPT
    assert failed_signals == [spent.pk]
    assert memory_broker.ids(Lane.DEFAULT) == {taken.pk, unknown.pk}
    assert recovery_pass.reclaim_dead() == 0


def test_a_name_that_only_begins_like_a_live_one_is_not_alive(
    memory_broker: MemoryBroker,
) -> None:
    heartbeats.beat("host:12:aaaaaaaaaaaa")
    other = claimed_by_owner("host:123:aaaaaaaaaaaa")
    assert recovery_pass.reclaim_dead() == 1
    assert state_of(other) == QUEUED


def test_recover_takes_back_claims_only_when_asked_to_judge(
    memory_broker: MemoryBroker,
) -> None:
    Heartbeat.objects.create(name="dead:2:bbbbbbbbbbbb", beat_at=ago(60))
    row = claimed_by_owner("dead:2:bbbbbbbbbbbb")
    assert recovery_pass.recover(judge_owners=False)["broker"] == 0
    assert state_of(row) == SENDING
    assert recovery_pass.recover(judge_owners=True)["reclaimed"] == 1
    assert state_of(row) == QUEUED


# -- the broker ---------------------------------------------------------------------


def test_a_lost_canary_publishes_every_queued_delivery_again(
    memory_broker: MemoryBroker,
) -> None:
    memory_broker.flush()
    due = delivery(message(), QUEUED, dispatched_at=ago(1))
    later = delivery(message(), QUEUED, next_attempt_at=hence(60), dispatched_at=ago(1))
    waiting = message(pending_inboxes="https://a.example/inbox")

    counts = recovery_pass.recover(judge_owners=False)

    assert counts["broker"] == 3, "two deliveries forgotten, one expansion restarted"
    assert counts["dispatched"] == 1
    assert memory_broker.queue_sizes([CANARY_QUEUE]) == {CANARY_QUEUE: 1}
    assert set(memory_broker.declared) == {*Lane.values, CANARY_QUEUE}
    assert memory_broker.ids(Lane.DEFAULT) == {due.pk}
    assert [
        m.args for m in memory_broker.queues[Lane.DEFAULT] if m.name != "django_outbox.deliver"
    ] == [(waiting.pk,)]
    # Not due yet: published by the pass when it is.
    assert Delivery.objects.get(pk=later.pk).dispatched_at is None
    memory_broker.take(Lane.DEFAULT)
    assert recovery_pass.recover(judge_owners=False) == {
        "broker": 0,
        "dispatched": 0,
        "signals": 0,
    }


def test_an_empty_lane_while_rows_wait_in_it_is_published_again(
    memory_broker: MemoryBroker, lane_clock: FakeClock
) -> None:
    recovery_pass.check_broker()  # the canary is in place; the lanes are seen empty
    lost = delivery(message(), QUEUED, next_attempt_at=ago(20), dispatched_at=ago(20))
    recent = delivery(message(), QUEUED, next_attempt_at=ago(5), dispatched_at=ago(5))
    urgent = delivery(
        message(lane=Lane.PRIORITY), QUEUED, next_attempt_at=ago(20), dispatched_at=now()
    )
    publish({Lane.PRIORITY: [urgent.pk]})

    assert recovery_pass.check_broker() == 0, "seen empty a moment ago: not judged yet"
    lane_clock.advance(HEARTBEAT_TIMEOUT)
    later = delivery(message(), QUEUED, next_attempt_at=ago(20), dispatched_at=now())
    assert recovery_pass.check_broker() == 1

    assert memory_broker.ids(Lane.DEFAULT) == {lost.pk}, "only a lane seen empty"
    assert recent.pk not in memory_broker.ids(Lane.DEFAULT), "due a moment ago"
    assert later.pk not in memory_broker.ids(Lane.DEFAULT), "dispatched after the look"
    assert recovery_pass.check_broker() == 0, "published again a moment ago"


def test_rows_published_before_the_oldest_waiting_message_are_published_again(
    memory_broker: MemoryBroker, lane_clock: FakeClock
) -> None:
    """A busy lane: every message published before the oldest one waiting was taken by
    a consumer.  Rows still queued a heartbeat timeout later were taken by one that
    died, or never published at all (their process died after its commit)."""
    recovery_pass.check_broker()  # the canary is in place
    taken = delivery(message(), QUEUED, next_attempt_at=ago(60), dispatched_at=ago(60))
    never_published = delivery(message(), QUEUED, next_attempt_at=ago(60), dispatched_at=ago(9))
    claimed_since = delivery(message(), SENDING, attempts=1, dispatched_at=ago(60))
    waiting = delivery(message(), QUEUED, next_attempt_at=ago(60), dispatched_at=now())
    publish({Lane.DEFAULT: [waiting.pk]})
    behind = delivery(message(), QUEUED, next_attempt_at=ago(60), dispatched_at=now())
    publish({Lane.DEFAULT: [behind.pk]})

    assert recovery_pass.check_broker() == 0
    lane_clock.advance(HEARTBEAT_TIMEOUT - 1)
    assert recovery_pass.check_broker() == 0, "judged by a look a heartbeat timeout old"
    lane_clock.advance(1)
    assert recovery_pass.check_broker() == 2

    assert memory_broker.ids(Lane.DEFAULT) == {taken.pk, never_published.pk, waiting.pk, behind.pk}
    assert Delivery.objects.get(pk=claimed_since.pk).state == SENDING
    assert [m.args[0] for m in memory_broker.queues[Lane.DEFAULT][2:]] == [
        sorted([taken.pk, never_published.pk])
    ]
    lane_clock.advance(HEARTBEAT_TIMEOUT)
    assert recovery_pass.check_broker() == 0, "stamped again when published again"


def one_dispatch(count: int) -> list[int]:
    """``count`` queued deliveries due a minute ago, stamped in one instant and published
    (given in descending order) two to a message, as one dispatch does; their ids."""
    parent = message()
    ids = [delivery(parent, QUEUED, next_attempt_at=ago(60)).pk for _ in range(count)]
    Delivery.objects.filter(pk__in=ids).update(dispatched_at=now())
    with override_settings(OUTBOX_CHUNK_SIZE=2):
        publish({Lane.DEFAULT: ids[::-1]})
    return ids


def test_the_messages_of_one_dispatch_before_the_oldest_waiting_are_told_apart(
    memory_broker: MemoryBroker, lane_clock: FakeClock
) -> None:
    """One dispatch, one stamp: its messages carry ascending ids, so those before the
    oldest one waiting are known taken although published in the same instant."""
    recovery_pass.check_broker()
    ids = one_dispatch(6)
    assert [m.args[0] for m in memory_broker.queues[Lane.DEFAULT]] == [ids[:2], ids[2:4], ids[4:]]
    memory_broker.take(Lane.DEFAULT, 1)  # by a worker that then dies

    recovery_pass.check_broker()
    lane_clock.advance(HEARTBEAT_TIMEOUT)
    assert recovery_pass.check_broker() == 2

    assert [m.args[0] for m in memory_broker.queues[Lane.DEFAULT]] == [
        ids[2:4],
        ids[4:],
        ids[:2],
    ]


def test_what_a_live_worker_took_and_claimed_within_the_grace_is_left_to_it(
    memory_broker: MemoryBroker, lane_clock: FakeClock
) -> None:
    recovery_pass.check_broker()
    ids = one_dispatch(4)
    (took,) = memory_broker.take(Lane.DEFAULT, 1)

    recovery_pass.check_broker()
    Delivery.objects.filter(pk__in=took.args[0]).update(state=SENDING, claimed_by="live:1:aa:1")
    lane_clock.advance(HEARTBEAT_TIMEOUT)
    assert recovery_pass.check_broker() == 0
    assert memory_broker.ids(Lane.DEFAULT) == set(ids[2:])


def test_a_failing_step_is_logged_and_the_others_run(
    memory_broker: MemoryBroker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def unreachable(queues: list[str]) -> dict[str, int | None]:
        raise ConnectionError("the broker went away")

    monkeypatch.setattr(memory_broker, "queue_sizes", unreachable)
    parked = delivery(message(), QUEUED, dispatched_at=None)
    with caplog.at_level(logging.WARNING, logger="django_outbox.recovery"):
        counts = recovery_pass.recover(judge_owners=False)
    assert counts == {"broker": 0, "dispatched": 1, "signals": 0}
    assert "recovery step 'broker' failed: ConnectionError" in caplog.text
    assert memory_broker.ids(Lane.DEFAULT) == {parked.pk}


# -- give-up signals ------------------------------------------------------------------


def test_a_give_up_whose_process_died_before_signalling_is_signalled_by_the_pass(
    memory_broker: MemoryBroker, failed_signals: list[int]
) -> None:
    row = delivery(message(), QUEUED)
    # The give-up committed; the process died before sending the signal.
    give_ups.give_up([row.pk], "given up by hand")
    Delivery.objects.filter(pk=row.pk).update(finished_at=ago(60))
    assert Delivery.objects.get(pk=row.pk).failed_signal_pending

    assert recovery_pass.recover(judge_owners=False)["signals"] == 1

    assert failed_signals == [row.pk]
    assert not Delivery.objects.get(pk=row.pk).failed_signal_pending
    assert recovery_pass.recover(judge_owners=False)["signals"] == 0


def test_a_give_up_that_signals_leaves_nothing_pending_nor_does_a_requeue(
    memory_broker: MemoryBroker, failed_signals: list[int]
) -> None:
    signalled, requeued = delivery(message(), QUEUED), delivery(message(), QUEUED)
    assert operations.give_up([signalled.pk], "given up by hand") == 1
    assert failed_signals == [signalled.pk]
    give_ups.give_up([requeued.pk], "given up by hand")
    operations.requeue([requeued.pk])
    assert not Delivery.objects.filter(failed_signal_pending=True).exists()


def test_a_lapsed_lease_of_a_live_owner_is_taken_back_by_the_pass(
    memory_broker: MemoryBroker,
) -> None:
    """A process that beats but never reports back: its lease lapses (by the database's
    clock) and the next pass takes the delivery back, beat or no beat."""
    heartbeats.beat("alive:3:cccccccccccc")
    row = claimed_by_owner("alive:3:cccccccccccc", lease_from_now=-1)
    assert recovery_pass.recover(judge_owners=False).get("lapsed") is None
    assert state_of(row) == SENDING
    counts = recovery_pass.recover(judge_owners=True)
    assert (counts["reclaimed"], counts["lapsed"]) == (0, 1)
    assert state_of(row) == QUEUED
    assert memory_broker.ids(Lane.DEFAULT) == {row.pk}

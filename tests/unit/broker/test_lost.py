"""The rule that tells lost deliveries from the lanes' oldest waiting messages."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from django_outbox.broker.backlog import Backlog, Sent
from django_outbox.broker.lost import PUBLISH_SLACK, Frontier, LaneWatch, frontiers_of, take_lost
from django_outbox.models import Delivery, DeliveryState, Lane
from tests.support.broker import RecordingApp
from tests.support.clocks import FakeClock
from tests.support.rows import ago, delivery, message

pytestmark = pytest.mark.django_db

QUEUED = DeliveryState.QUEUED
GRACE = 15.0


def stamped(at: datetime | None, lane: str = Lane.DEFAULT, **fields: object) -> Delivery:
    """A queued delivery (due a minute ago unless told), published (by its stamp) at ``at``."""
    state = fields.pop("state", QUEUED)
    values = {"next_attempt_at": ago(60), **fields}
    return delivery(message(lane=lane), state, dispatched_at=at, **values)


# -- frontiers ------------------------------------------------------------------------


def test_an_empty_lane_shows_everything_before_the_look_taken() -> None:
    seen = timezone.now()
    assert frontiers_of(Backlog(0, ()), seen) == (Frontier(seen),)
    assert frontiers_of(Backlog(0), seen) == (Frontier(seen),), "whatever the broker"


def test_a_busy_lane_shows_nothing_unless_its_oldest_messages_say_when_they_were_sent() -> None:
    seen = timezone.now()
    assert frontiers_of(Backlog(3), seen) is None, "a broker that cannot look (RabbitMQ)"
    assert frontiers_of(Backlog(3, (None,)), seen) is None, "none of the package's"
    assert frontiers_of(Backlog(3, ()), seen) is None, "no list shown: not all taken"
    ours = Sent(ago(30), None)
    assert frontiers_of(Backlog(3, (ours, None)), seen) is None, "one list unknown"
    assert frontiers_of(Backlog(3, (ours,)), seen) == (Frontier(ours.at),)


def test_a_message_s_own_dispatch_is_found_by_its_first_row_unless_stamped_again() -> None:
    sent_at = ago(30)
    first = stamped(sent_at - timedelta(milliseconds=3))
    again = stamped(ago(1))  # published again after the message was sent
    seen = timezone.now()
    (frontier,) = frontiers_of(Backlog(1, (Sent(sent_at, first.pk),)), seen) or ()
    assert frontier == Frontier(sent_at, first.dispatched_at, first.pk)
    (frontier,) = frontiers_of(Backlog(1, (Sent(sent_at, again.pk),)), seen) or ()
    assert frontier == Frontier(sent_at, None, again.pk)


def test_a_publish_time_ahead_of_the_leader_is_not_believed_and_is_told_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = LaneWatch(FakeClock())
    ahead = Backlog(1, (Sent(timezone.now() + timedelta(minutes=5), None),))
    with caplog.at_level(logging.WARNING, logger="django_outbox.recovery"):
        before = timezone.now()
        watch.judge({Lane.DEFAULT: ahead}, GRACE)
        watch.judge({Lane.DEFAULT: ahead}, GRACE)
    assert caplog.text.count("ahead of this process's clock") == 1
    (frontier,) = frontiers_of(ahead, before) or ()
    assert frontier.before == before


# -- the rows a frontier shows lost ------------------------------------------------------


def test_rows_stamped_before_a_frontier_less_the_slack_are_lost() -> None:
    at = ago(30)
    lost = stamped(at - timedelta(seconds=PUBLISH_SLACK + 1))
    within_slack = stamped(at - timedelta(seconds=PUBLISH_SLACK - 1))
    after = stamped(at + timedelta(seconds=1))
    other_lane = stamped(ago(60), lane=Lane.PRIORITY)
    due_lately = stamped(ago(60), next_attempt_at=ago(5))
    claimed = stamped(ago(60), state=DeliveryState.SENDING)
    parked = stamped(None)

    assert take_lost({Lane.DEFAULT: (Frontier(at),)}, GRACE) == {Lane.DEFAULT: [lost.pk]}

    kept = (within_slack, after, other_lane, due_lately, claimed, parked)
    assert all(Delivery.objects.get(pk=row.pk).dispatched_at == row.dispatched_at for row in kept)
    assert Delivery.objects.get(pk=lost.pk).dispatched_at > ago(1), "stamped again"
    assert take_lost({}, GRACE) == {}


def test_rows_of_earlier_dispatches_and_of_its_own_below_its_first_id_are_lost() -> None:
    stamp = ago(10)
    rows = [stamped(stamp) for _ in range(4)]
    earlier = stamped(stamp - timedelta(microseconds=1))
    later = stamped(stamp + timedelta(microseconds=1))
    frontier = Frontier(stamp + timedelta(milliseconds=5), stamp, rows[2].pk)

    found = take_lost({Lane.DEFAULT: (frontier,)}, GRACE)

    assert found == {Lane.DEFAULT: sorted([rows[0].pk, rows[1].pk, earlier.pk])}
    assert Delivery.objects.get(pk=later.pk).dispatched_at == later.dispatched_at


def test_a_stamp_is_not_believed_beyond_the_look() -> None:
    seen = ago(30)
    assert Frontier(seen, seen + timedelta(seconds=5), 1).cutoff == seen
    assert Frontier(seen).cutoff == seen - timedelta(seconds=PUBLISH_SLACK)


def test_a_lane_of_several_lists_shows_taken_only_what_each_list_shows_taken() -> None:
    """A message went to one of the lane's priority lists, which one is not known: it
    was taken only if it would have been, whichever it was."""
    old, newer = ago(120), ago(60)
    both = stamped(old - timedelta(seconds=10))
    one = stamped(newer - timedelta(seconds=10))
    judged = {Lane.DEFAULT: (Frontier(old), Frontier(newer))}
    assert take_lost(judged, GRACE) == {Lane.DEFAULT: [both.pk]}
    assert Delivery.objects.get(pk=one.pk).dispatched_at == one.dispatched_at


# -- the watch -------------------------------------------------------------------------


def test_the_watch_judges_by_the_newest_look_at_least_a_grace_old() -> None:
    clock = FakeClock()
    watch = LaneWatch(clock)
    looks = [Backlog(1, (Sent(ago(100 - n), None),)) for n in range(10)]
    assert watch.judge({Lane.DEFAULT: looks[0]}, GRACE) == {}
    for n in range(1, 10):
        clock.advance(3)
        judged = watch.judge({Lane.DEFAULT: looks[n]}, GRACE)
    # The last look is at 27 s: the newest at 12 s or before is the fifth (12 s).
    assert judged == {Lane.DEFAULT: (Frontier(looks[4].oldest[0].at),)}  # type: ignore[index]
    clock.advance(3)
    unknown = watch.judge({Lane.DEFAULT: Backlog(5, (None,))}, GRACE)
    assert unknown == {Lane.DEFAULT: (Frontier(looks[5].oldest[0].at),)}  # type: ignore[index]
    assert len(watch._seen[Lane.DEFAULT]) <= GRACE / 3 + 1


def test_a_lost_expansion_is_restarted_once_until_the_frontier_passes_its_restart(
    broker: RecordingApp,
) -> None:
    pending = "https://a.example/inbox\nhttps://b.example/inbox"
    stuck = message(pending_inboxes=pending, created_at=ago(60))
    young = message(pending_inboxes=pending, created_at=ago(1))  # may be under way
    message(pending_inboxes=pending, created_at=ago(60), lane=Lane.PRIORITY)
    watch = LaneWatch(FakeClock())
    judged = {Lane.DEFAULT: (Frontier(ago(30)),)}

    assert watch.restart_lost_expansions(judged) == 1
    assert broker.expansions() == [stuck.pk]
    assert watch.restart_lost_expansions(judged) == 0, "restarted since the look"
    later = {Lane.DEFAULT: (Frontier(timezone.now() + timedelta(seconds=PUBLISH_SLACK + 1)),)}
    broker.clear()
    assert watch.restart_lost_expansions(later) == 2, "its restart was taken too"
    assert sorted(broker.expansions()) == [stuck.pk, young.pk]

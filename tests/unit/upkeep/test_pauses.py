"""Pausing a host by hand: its deliveries are held (parked, no attempt spent, visible as
held) until it is resumed or its pause ends; bad input is refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_outbox import outbox
from django_outbox.exceptions import InvalidHost
from django_outbox.models import Delivery, DeliveryState, HostPause
from django_outbox.testing import OutboxCapture, captured_sends
from django_outbox.upkeep import pauses
from django_outbox.upkeep.pauses import (
    RECHECK,
    REFRESH,
    RELEASE_SPREAD,
    end_lapsed_pauses,
    ended_pauses,
    forget_cached,
    paused_hosts,
    pauses_in_force,
)
from testproject.demo.keys import ACTOR
from tests.support.receivers import ACTIVITY
from tests.support.sends import inboxes

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(django_capture_on_commit_callbacks: Callable[..., Any]) -> Iterator[OutboxCapture]:
    """Two deliveries to paused.example and one to other.example, committed and captured."""
    with captured_sends() as capture:
        with django_capture_on_commit_callbacks(execute=True):
            outbox.send(ACTOR, ACTIVITY, [*inboxes(2, "paused"), *inboxes(1, "other")])
        yield capture
    forget_cached()


def states() -> dict[str, tuple[str, int, str]]:
    rows = Delivery.objects.order_by("id")
    return {row.inbox: (row.state, row.attempts, row.last_error) for row in rows}


def test_a_paused_hosts_deliveries_are_held_until_it_is_resumed(
    sent: OutboxCapture, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    outbox.pause_host("paused.example", "asked by its admin")
    before = timezone.now()
    sent.deliver_all()
    paused, other = inboxes(2, "paused"), inboxes(1, "other")
    held = "held: paused.example is paused: asked by its admin"
    assert states() == {
        paused[0]: (DeliveryState.QUEUED, 0, held),
        paused[1]: (DeliveryState.QUEUED, 0, held),
        other[0]: (DeliveryState.DELIVERED, 1, ""),
    }
    assert [r.url for r in sent.inbox.requests] == other, "no request to the paused host"
    due = {row.next_attempt_at for row in Delivery.objects.filter(host="paused.example")}
    assert all(before + timedelta(seconds=RECHECK - 5) < moment for moment in due)

    published = len(sent.tasks)
    with django_capture_on_commit_callbacks(execute=True):
        assert outbox.resume_host("paused.example") == 2
    again = sorted(pk for task in sent.tasks[published:] for pk in task.args[0])
    assert again == sorted(
        Delivery.objects.filter(host="paused.example").values_list("id", flat=True)
    )
    assert not pauses_in_force().exists()
    assert end_lapsed_pauses() == 0, "ended now: its row stays for the slow start"
    sent.deliver_all(retry_now=True)
    assert {state for state, _, _ in states().values()} == {DeliveryState.DELIVERED}


def test_a_pause_with_an_end_parks_its_deliveries_until_then(sent: OutboxCapture) -> None:
    until = timezone.now() + timedelta(minutes=2)
    outbox.pause_host("PAUSED.example", until=until)
    sent.deliver_all()
    rows = Delivery.objects.filter(host="paused.example")
    spread = timedelta(seconds=RELEASE_SPREAD)
    assert all(until <= row.next_attempt_at < until + spread for row in rows)
    assert {row.last_error for row in rows} == {"held: paused.example is paused"}


def test_a_pause_that_has_ended_holds_nothing(sent: OutboxCapture) -> None:
    HostPause.objects.create(name="paused.example", until=timezone.now() - timedelta(seconds=1))
    assert paused_hosts() == {}
    sent.deliver_all()
    assert {state for state, _, _ in states().values()} == {DeliveryState.DELIVERED}
    assert end_lapsed_pauses() == 0, "its row stays for the slow start (60 s)"
    HostPause.objects.update(until=timezone.now() - timedelta(seconds=61))
    assert end_lapsed_pauses() == 1
    assert not HostPause.objects.exists()


@pytest.mark.parametrize(
    "host", ["", "https://a.example/", "a.example:8443", "a b.example", "a.example/inbox"]
)
def test_a_value_that_is_not_a_host_name_is_refused(host: str) -> None:
    with pytest.raises(InvalidHost):
        outbox.pause_host(host)
    assert not HostPause.objects.exists()


def test_a_pause_cannot_end_in_the_past() -> None:
    with pytest.raises(InvalidHost, match="past"):
        outbox.pause_host("a.example", until=timezone.now() - timedelta(minutes=1))
    assert not HostPause.objects.exists()


def test_the_command_pauses_and_resumes_a_host() -> None:
    out = StringIO()
    call_command(
        "outbox", "hosts", "pause", "a.example", "--reason", "incident", "--until", "2h", stdout=out
    )
    pause = HostPause.objects.get()
    assert (pause.name, pause.reason) == ("a.example", "incident")
    assert pause.until is not None
    assert timedelta(minutes=119) < pause.until - timezone.now() <= timedelta(hours=2)
    assert "paused a.example until" in out.getvalue()
    report = StringIO()
    call_command("outbox", "status", "--host", "a.example", stdout=report)
    assert "paused since" in report.getvalue() and "incident" in report.getvalue()
    call_command("outbox", "hosts", "resume", "a.example", stdout=out)
    assert "resumed a.example: 0 deliveries sent again" in out.getvalue()
    assert not pauses_in_force().exists()
    report = StringIO()
    call_command("outbox", "status", "--host", "a.example", stdout=report)
    assert "paused since" not in report.getvalue()


def test_the_command_refuses_a_bad_end_cleanly() -> None:
    with pytest.raises(CommandError, match="give a duration"):
        call_command("outbox", "hosts", "pause", "a.example", "--until", "soon")
    assert not HostPause.objects.exists()


def test_a_resumed_pause_publishes_its_deliveries_spread_over_seconds(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    """The held deliveries are due at once; each one's message is published with a
    countdown at random within RELEASE_SPREAD seconds from REFRESH seconds on."""
    with captured_sends() as capture:
        with django_capture_on_commit_callbacks(execute=True):
            outbox.send(ACTOR, ACTIVITY, inboxes(40, "paused"))
        outbox.pause_host("paused.example")
        capture.deliver_all()
        published = len(capture.tasks)
        with django_capture_on_commit_callbacks(execute=True):
            assert outbox.resume_host("paused.example") == 40
        assert not Delivery.objects.filter(next_attempt_at__gt=timezone.now()).exists()
        countdowns = {
            pk: task.countdown for task in capture.tasks[published:] for pk in task.args[0]
        }
        assert set(countdowns) == set(Delivery.objects.values_list("id", flat=True))
        assert all(
            c is not None and REFRESH <= c < REFRESH + RELEASE_SPREAD for c in countdowns.values()
        )
        assert len(set(countdowns.values())) > 5, "spread, not all at once"
    forget_cached()


class Clock:
    """``timezone`` for the pauses module, at a time the test sets."""

    def __init__(self) -> None:
        self.at = timezone.now()

    def now(self) -> datetime:
        return self.at


def test_a_process_reads_each_recent_pause_end_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lapsed or resumed, a pause ended at its ``until``; each end is given once, for a
    slow start's length (then the sweeper deletes its row)."""
    clock = Clock()
    monkeypatch.setattr(pauses, "timezone", clock)
    start = clock.at
    outbox.pause_host("lapsing.example", until=start + timedelta(seconds=10))
    outbox.pause_host("resumed.example")
    outbox.pause_host("still.example")
    forget_cached()
    assert ended_pauses() == {}
    clock.at = start + timedelta(seconds=30)
    outbox.resume_host("resumed.example")
    assert set(paused_hosts()) == {"still.example"}
    assert ended_pauses() == {
        "lapsing.example": start + timedelta(seconds=10),
        "resumed.example": start + timedelta(seconds=30),
    }
    assert ended_pauses() == {}, "each end once"
    clock.at = start + timedelta(seconds=80)  # OUTBOX_SLOW_START_SECONDS = 60 after the first
    assert end_lapsed_pauses() == 1
    assert set(HostPause.objects.values_list("name", flat=True)) == {
        "resumed.example",
        "still.example",
    }

"""The supervisor: parts whose threads end or whose steps get stuck, and what follows."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_outbox.values.claimed import ClaimedRow
from django_outbox.worker import supervisor as supervision
from django_outbox.worker.supervisor import Part, Supervisor


def row(pk: int) -> ClaimedRow:
    return ClaimedRow(pk, 1, f"https://a.example/{pk}", "a.example", [], "outbox", "", 1, "t")


class Handled:
    """Stands in for the fatal handler: what it was called with, and when."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[ClaimedRow], str]] = []
        self.event = threading.Event()

    def __call__(self, reason: str, held: list[ClaimedRow]) -> None:
        self.calls.append((reason, held, threading.current_thread().name))
        self.event.set()


def test_a_step_under_way_is_busy_and_stuck_past_its_limit() -> None:
    part = Part("recorder", stall_after=10.0)
    assert part.health() == supervision.PartHealth(True, 0.0, False)
    with part.step("saving 3 outcomes", [row(1)]):
        now = time.monotonic()
        assert not part.health(now + 9).stuck
        late = part.health(now + 11)
        assert late.stuck and late.doing == "saving 3 outcomes" and late.busy_for >= 11
        assert part.held_rows() == [row(1)]
    assert not part.health(time.monotonic() + 100).stuck
    assert part.held_rows() == []


def test_steps_of_several_threads_are_counted_by_the_oldest() -> None:
    part = Part("task", stall_after=5.0)
    with part.step("first"):
        time.sleep(0.02)
        with part.step("second"):
            assert part.health().doing == "first"


def test_a_loop_that_stops_turning_is_stuck() -> None:
    part = Part("event loop", stall_after=1.0)
    part.tick()
    assert not part.health().stuck
    assert part.health(time.monotonic() + 2).stuck
    assert part.health(time.monotonic() + 2).doing == "turning"


def test_an_ended_thread_makes_the_process_unfit_and_a_stuck_pass_only_stops_leading() -> None:
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    watched = Supervisor()
    recovery = watched.add(Part("recovery pass", 0.01, may_lead_only=True))
    assert watched.check() == "" and watched.may_lead()
    with recovery.step("recovery step 'broker'"):
        time.sleep(0.03)
        assert watched.check() == ""  # stuck, but only leading is given up
        assert not watched.may_lead()
    assert watched.may_lead()
    watched.add(Part("recorder", 10.0, threads=lambda: (ended,)))
    assert watched.check() == "the recorder thread has ended"


def test_failing_calls_the_handler_once_on_a_thread_of_its_own_with_the_held_rows() -> None:
    handled = Handled()
    watched = Supervisor(handled)
    task = watched.add(Part("task", 10.0))
    with task.step("preparing 2 claimed deliveries", [row(1), row(2)]):
        watched.fail("the task has been stuck for 11 s")
        watched.fail("again")
    assert handled.event.wait(5)
    time.sleep(0.05)
    assert handled.calls == [("the task has been stuck for 11 s", [row(1), row(2)], "outbox-unfit")]
    assert watched.broken == "the task has been stuck for 11 s"
    assert not watched.may_lead()


def test_the_watching_thread_fails_the_process_when_a_step_gets_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(supervision, "WATCH_EVERY", 0.01)
    handled = Handled()
    watched = Supervisor(handled).start()
    part = watched.add(Part("recorder", 0.05))
    release = threading.Event()

    def stuck() -> None:
        with part.step("saving 1 outcomes", [row(9)]):
            release.wait(5)

    threading.Thread(target=stuck, daemon=True).start()
    try:
        assert handled.event.wait(5)
    finally:
        release.set()
    reason, held, _ = handled.calls[0]
    assert reason.startswith("the recorder has been stuck for") and "(saving 1 outcomes)" in reason
    assert held == [row(9)]


def test_the_supervisor_is_one_per_process() -> None:
    assert supervision.this_supervisor() is supervision.this_supervisor()


def test_health_is_json_ready() -> None:
    part = Part("heartbeat", 10.0)
    with part.step("beating"):
        found: dict[str, Any] = part.health().as_dict()
    assert set(found) == {"alive", "busy_for", "stuck", "doing"} and found["doing"] == "beating"

"""Ending a process that cannot go on: it stops beating, gives back what it holds, forgets
its heartbeat row and exits, even when handing back hangs."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import override_settings

from django_outbox.values.claimed import ClaimedRow
from django_outbox.worker import lifecycle
from django_outbox.worker.supervisor import Part, Supervisor


def row(pk: int) -> ClaimedRow:
    return ClaimedRow(pk, 1, f"https://a.example/{pk}", "a.example", [], "outbox", "", 1, "t")


class _Engine:
    """An engine with one delivery that never started."""

    def __init__(self, steps: list[Any]) -> None:
        self.steps = steps

    def stop(self) -> list[Any]:
        if "engine stopped" in self.steps:
            return []
        self.steps.append("engine stopped")
        return [SimpleNamespace(row=row(5))]


class Scene:
    """A heart, an engine and a process standing in for the real ones, noting each step."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, recorder_stuck: bool = False) -> None:
        self.steps: list[Any] = []
        self.exited = threading.Event()
        watched = Supervisor()
        recorder = watched.add(Part("recorder", 0.0 if recorder_stuck else 60.0))
        if recorder_stuck:
            self._stuck = recorder.step("saving 3 outcomes")
            self._stuck.__enter__()
        heart = SimpleNamespace(
            stop_threads=lambda: self.steps.append("heart stopped"),
            forget=lambda: self.steps.append("row deleted"),
        )
        engine = _Engine(self.steps)
        process = SimpleNamespace(
            engine=engine,
            stop=lambda timeout, recorder_works: self.steps.append(("stopped", recorder_works)),
        )
        monkeypatch.setattr(lifecycle, "this_supervisor", lambda: watched)
        monkeypatch.setattr(lifecycle, "current_heart", lambda: heart)
        monkeypatch.setattr(lifecycle, "current_process", lambda: process)
        monkeypatch.setattr(
            lifecycle,
            "give_back",
            lambda rows: self.steps.append(("given back", [r.id for r in rows])),
        )
        monkeypatch.setattr(lifecycle, "exit_process", self.exit)

    def exit(self, reason: str) -> None:
        self.steps.append(("exit", reason))
        self.exited.set()


def test_an_unfit_process_hands_back_then_forgets_its_row_and_exits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scene = Scene(monkeypatch)
    lifecycle.end_unfit_process("the task has been stuck for 11 s", [row(1), row(2)])
    assert scene.steps == [
        "heart stopped",
        "engine stopped",
        ("given back", [1, 2, 5]),
        ("stopped", True),
        "row deleted",
        ("exit", "the task has been stuck for 11 s"),
    ]


def test_with_its_recorder_stuck_it_does_not_wait_for_the_recorder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scene = Scene(monkeypatch, recorder_stuck=True)
    lifecycle.end_unfit_process("the recorder has been stuck for 10 s", [])
    assert ("stopped", False) in scene.steps


@override_settings(OUTBOX_STOP_TIMEOUT=0.1, OUTBOX_STALL_TIMEOUT=0.1)
def test_handing_back_that_hangs_does_not_keep_the_process_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scene = Scene(monkeypatch)
    hang = threading.Event()
    monkeypatch.setattr(lifecycle, "give_back", lambda rows: hang.wait(10))
    worker = threading.Thread(
        target=lifecycle.end_unfit_process, args=("the event loop has ended", [row(1)]), daemon=True
    )
    worker.start()
    try:
        assert scene.exited.wait(5)
    finally:
        hang.set()
        worker.join(5)  # it exits again, through the stand-in, before the test ends
    exits = [step for step in scene.steps if step[0] == "exit"]
    assert exits[0] == ("exit", "the event loop has ended; handing back took too long")

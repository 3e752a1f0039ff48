"""Claiming as the engine has room: priority work is looked for, the wait is bounded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import OperationalError
from django.test import override_settings

from django_outbox.models import Delivery
from django_outbox.worker import claiming as worker


class Engine:
    """An engine with no room for ``full`` waits (for ever if None), then ``room``."""

    def __init__(self, full: int | None, room: int = 100) -> None:
        self.full = full
        self.asked = 0
        self._room = room
        self.wanted = 0
        self.submitted: list[object] = []

    def wait_for_room(self, timeout: float, at_least: int = 1) -> bool:
        self.asked += 1
        self.wanted = at_least
        return self.full is not None and self.asked > self.full

    def room(self) -> int:
        return self._room

    def submit(self, jobs: list[object]) -> list[object]:
        self.submitted += jobs
        return []


def test_a_database_error_while_looking_for_priority_work_does_not_stop_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreachable(*args: object, **kwargs: object) -> None:
        raise OperationalError("the database went away")

    monkeypatch.setattr(Delivery.objects, "filter", unreachable)
    engine = Engine(full=1, room=7)
    room = worker._room(SimpleNamespace(engine=engine), 1e18, left=3)  # type: ignore[arg-type]
    assert engine.asked == 2, "it looked for priority work once, and it failed"
    assert room == 7


def test_a_task_waits_for_room_only_so_long(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "_urgent_jobs", lambda process: [])
    engine = Engine(full=None, room=0)
    deadline = worker.time.monotonic() + 0.2
    room = worker._room(SimpleNamespace(engine=engine), deadline, left=5)  # type: ignore[arg-type]
    assert room == worker._NO_LIMIT, "everything left is claimed after the limit"


@override_settings(OUTBOX_CONCURRENCY=256)
def test_it_waits_for_room_for_a_quarter_of_the_concurrency_or_all_that_is_left() -> None:
    engine = Engine(full=0, room=0)
    assert worker._room(SimpleNamespace(engine=engine), 1e18, left=50) == 50  # type: ignore[arg-type]
    assert engine.wanted == 50
    assert worker._room(SimpleNamespace(engine=engine), 1e18, left=500) == 64  # type: ignore[arg-type]
    assert engine.wanted == 64

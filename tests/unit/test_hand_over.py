"""Handing claimed jobs to a full engine: priority work is looked for, the wait is bounded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import OperationalError

from django_outbox.models import Delivery, Lane
from django_outbox.worker import process as worker


def test_a_database_error_while_looking_for_priority_work_does_not_stop_the_hand_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class FullOnce:
        """An engine with no room at first, then room for everything."""

        def __init__(self) -> None:
            self.asked = 0
            self.submitted: list[object] = []

        def wait_for_room(self, timeout: float) -> bool:
            self.asked += 1
            return self.asked > 1

        def room(self) -> int:
            return 100

        def submit(self, jobs: list[object]) -> list[object]:
            self.submitted += jobs
            return []

    def unreachable(*args: object, **kwargs: object) -> None:
        raise OperationalError("the database went away")

    monkeypatch.setattr(Delivery.objects, "filter", unreachable)
    engine = FullOnce()
    jobs = [SimpleNamespace(row=SimpleNamespace(lane=Lane.DEFAULT)) for _ in range(3)]
    worker._hand_over(SimpleNamespace(engine=engine), jobs, wait=True)  # type: ignore[arg-type]
    assert engine.asked == 2, "it looked for priority work once, and it failed"
    assert engine.submitted == jobs


def test_a_task_waits_for_room_only_so_long(monkeypatch: pytest.MonkeyPatch) -> None:
    class NeverRoom:
        """An engine that has stopped making progress."""

        def __init__(self) -> None:
            self.submitted: list[object] = []

        def wait_for_room(self, timeout: float) -> bool:
            return False

        def room(self) -> int:
            return 0

        def submit(self, jobs: list[object]) -> list[object]:
            self.submitted += jobs
            return []

    monkeypatch.setattr(worker, "_ROOM_WAIT_LIMIT", 0.2)
    monkeypatch.setattr(worker, "_urgent_jobs", lambda process: [])
    engine = NeverRoom()
    jobs = [SimpleNamespace(row=SimpleNamespace(lane=Lane.DEFAULT)) for _ in range(3)]
    worker._hand_over(SimpleNamespace(engine=engine), jobs, wait=True)  # type: ignore[arg-type]
    assert engine.submitted == jobs, "handed over after the limit, not held for ever"

"""A Celery pool process is ready to deliver as it starts: its engine, recorder and
transport exist and its heart beats before the first task, and its supervisor watches
them, with the handler that ends the process if one of them fails."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery.signals import worker_process_init

from django_outbox.worker import lifecycle


def test_a_pool_process_starts_its_engine_its_heart_and_its_supervisor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[Any] = []
    backlog = SimpleNamespace(backlog=lambda: 7)
    supervisor = SimpleNamespace(
        set_fatal_handler=lambda handler: started.append(("handler", handler)),
        start=lambda: started.append("supervisor"),
    )
    monkeypatch.setattr(lifecycle, "_started", None)
    monkeypatch.setattr(lifecycle, "this_supervisor", lambda: supervisor)
    monkeypatch.setattr(
        lifecycle,
        "this_process",
        lambda: started.append("engine") or SimpleNamespace(recorder=backlog),
    )
    monkeypatch.setattr(
        lifecycle, "start_heart", lambda backlog: started.append(("heart", backlog()))
    )
    worker_process_init.send(sender=None)
    assert started == [
        ("handler", lifecycle.end_unfit_process),
        "engine",
        ("heart", 7),
        "supervisor",
    ]
    worker_process_init.send(sender=None)  # once per process
    assert len(started) == 4

"""A Celery pool process is ready to deliver as it starts: its heart beats and its
engine, recorder and transport exist before the first task."""

from __future__ import annotations

import pytest
from celery.signals import worker_process_init

import django_outbox.tasks as tasks


def test_a_pool_process_starts_its_heart_and_its_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    monkeypatch.setattr(tasks, "start_heart", lambda: started.append("heart"))
    monkeypatch.setattr(tasks, "this_process", lambda: started.append("engine"))
    worker_process_init.send(sender=None)
    assert started == ["heart", "engine"]

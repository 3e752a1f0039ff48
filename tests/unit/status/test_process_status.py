"""The worker processes in ``outbox status`` and the metrics, from their heartbeat rows."""

from __future__ import annotations

import pytest

from django_outbox.metrics.collectors import process_families
from django_outbox.models import Heartbeat
from django_outbox.status.processes import process_statuses
from django_outbox.status.text import render_processes
from tests.support.rows import ago

pytestmark = pytest.mark.django_db

WELL = {"alive": True, "busy_for": 0.0, "stuck": False, "doing": ""}


def scene() -> None:
    Heartbeat.objects.create(
        name="w1:10:aaaaaaaaaaaa",
        beat_at=ago(1),
        leader=True,
        parts={"recorder": WELL, "event loop": WELL},
        backlog=3,
    )
    stuck = {"alive": True, "busy_for": 12.5, "stuck": True, "doing": "saving 40 outcomes"}
    Heartbeat.objects.create(
        name="w1:11:bbbbbbbbbbbb",
        beat_at=ago(2),
        can_lead=False,
        parts={"recorder": stuck, "event loop": WELL},
        backlog=40,
    )
    Heartbeat.objects.create(name="w2:12:cccccccccccc", beat_at=ago(120), parts={"recorder": WELL})
    Heartbeat.objects.create(name="w2:13:dddddddddddd", beat_at=ago(3600))  # long dead: left out


def test_the_processes_are_read_with_their_parts_by_the_database_clock() -> None:
    scene()
    found = process_statuses()
    assert [p.name for p in found] == [
        "w1:10:aaaaaaaaaaaa",
        "w1:11:bbbbbbbbbbbb",
        "w2:12:cccccccccccc",
    ]
    assert [p.beating for p in found] == [True, True, False]
    assert 0.5 < found[0].silent_for < 10 and found[2].silent_for > 100
    assert found[1].unwell == ["recorder"]
    data = found[1].as_dict()
    assert (data["can_lead"], data["recorder_backlog"], data["unwell"]) == (False, 40, ["recorder"])


def test_the_text_names_the_leader_and_what_ails_each_process() -> None:
    scene()
    text = "\n".join(render_processes(process_statuses()))
    assert "worker processes: 2 beating, leader w1:10:aaaaaaaaaaaa" in text
    assert "recorder stuck 12s (saving 40 outcomes)" in text
    assert "may not lead" in text and "(dead)" in text and "all well" in text


def test_no_process_beating_is_said_loudly() -> None:
    assert render_processes([])[0] == (
        "worker processes: NONE is beating: nothing is being sent or recovered"
    )


def test_the_gauges_count_the_beating_processes_their_leaders_backlog_and_ailing_parts() -> None:
    scene()
    families = {family.name: family for family in process_families(process_statuses())}
    value = {name: family.samples[0].value for name, family in families.items()}
    assert value["outbox_processes_beating"] == 2
    assert value["outbox_process_leaders"] == 1
    assert value["outbox_recorder_backlog"] == 43
    unwell = {s.labels["part"]: s.value for s in families["outbox_process_parts_unwell"].samples}
    assert unwell == {"event loop": 0, "recorder": 1}

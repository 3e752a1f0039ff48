"""Heartbeats: rows by the database's clock, who leads, and when a process may judge others."""

from __future__ import annotations

import time

import pytest
from django.db import OperationalError
from django.test import override_settings

from django_outbox.models import Heartbeat
from django_outbox.store import heartbeats
from django_outbox.store.claim_rows import new_token, owner_name
from django_outbox.worker import heartbeat
from django_outbox.worker.heartbeat import Heart
from django_outbox.worker.supervisor import Part, Supervisor
from tests.support.rows import ago

pytestmark = pytest.mark.django_db


def test_a_beat_makes_the_row_then_moves_it_on() -> None:
    heartbeats.beat("h:1:a")
    first = Heartbeat.objects.get(name="h:1:a").beat_at
    Heartbeat.objects.filter(name="h:1:a").update(beat_at=ago(60))
    heartbeats.beat("h:1:a")
    assert Heartbeat.objects.count() == 1
    assert Heartbeat.objects.get(name="h:1:a").beat_at >= first


def test_live_names_are_those_that_beat_within_the_timeout_oldest_first() -> None:
    Heartbeat.objects.create(name="old:1:a", beat_at=ago(20))
    heartbeats.beat("b:2:b")
    heartbeats.beat("c:3:c")
    assert heartbeats.live_names(15) == ["b:2:b", "c:3:c"]
    assert heartbeats.live_names(30) == ["old:1:a", "b:2:b", "c:3:c"]


def test_stopping_deletes_the_row_and_prune_only_the_long_dead() -> None:
    heartbeats.beat("a:1:a")
    heartbeats.stop_beating("a:1:a")
    assert not Heartbeat.objects.exists()
    Heartbeat.objects.create(name="dead:1:a", beat_at=ago(heartbeats.KEPT + 60))
    Heartbeat.objects.create(name="recent:1:a", beat_at=ago(60))
    assert heartbeats.prune() == 1
    assert list(Heartbeat.objects.values_list("name", flat=True)) == ["recent:1:a"]


def test_claim_tokens_carry_the_owner_name() -> None:
    name = owner_name()
    _host, pid, token = name.split(":")
    assert pid.isdigit() and len(token) == 12
    assert new_token().startswith(f"{name}:")
    assert new_token() != new_token()


def test_the_oldest_live_process_leads() -> None:
    Heartbeat.objects.create(name="stale:1:a", beat_at=ago(60))
    Heartbeat.objects.create(name="older:2:b", beat_at=ago(1))
    mine = Heart()
    mine.beat_once()
    assert not mine.leader, "a live process with an older row leads"
    Heartbeat.objects.filter(name="older:2:b").update(beat_at=ago(7))
    mine.beat_once()
    assert mine.leader, "a row two beats late no longer leads, though not yet dead"
    assert mine._pass_due.is_set(), "a leader's beat asks for a recovery pass"


def test_a_process_judges_others_only_after_two_intervals_of_steady_beats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(heartbeat.time, "monotonic", lambda: clock[0])
    with override_settings(OUTBOX_HEARTBEAT_INTERVAL=3, OUTBOX_HEARTBEAT_TIMEOUT=15):
        heart = Heart()
    heart.beat_once()
    assert not heart.may_judge()
    clock[0] += 3
    heart.beat_once()
    assert not heart.may_judge()
    clock[0] += 3
    heart.beat_once()
    assert heart.may_judge()
    # A gap longer than the timeout (the process or its database was stuck): start again.
    clock[0] += 20
    heart.beat_once()
    assert not heart.may_judge()


def test_a_failed_beat_ends_the_steady_run(monkeypatch: pytest.MonkeyPatch) -> None:
    heart = Heart()
    heart.beat_once()
    assert heart.steady_since is not None

    def unreachable(name: str, **report: object) -> None:
        raise OperationalError("the database went away")

    monkeypatch.setattr(heartbeat, "beat", unreachable)
    monkeypatch.setattr(heartbeat.connections, "close_all", lambda: None)
    heart.beat_once()
    assert heart.steady_since is None and not heart.may_judge()


def test_stopping_a_heart_that_never_ran_threads_deletes_its_row() -> None:
    heart = Heart()
    heart.beat_once()
    heart.stop()
    assert not Heartbeat.objects.exists()


def test_a_process_whose_recovery_pass_is_stuck_hands_the_leadership_on() -> None:
    stuck_watch, other_watch = Supervisor(), Supervisor()
    older, younger = Heart(stuck_watch), Heart(other_watch)
    younger.name = "another:2:b"  # a second process (one process has one name)
    older.beat_once()
    younger.beat_once()
    assert older.leader and not younger.leader
    recovery = stuck_watch.add(Part("recovery pass", 0.01, may_lead_only=True))
    with recovery.step("recovery step 'broker'"):
        time.sleep(0.03)
        older.beat_once()
        younger.beat_once()
        assert not older.leader and younger.leader
        row = Heartbeat.objects.get(name=older.name)
        assert not row.can_lead
        assert row.parts["recovery pass"]["stuck"]
        assert row.parts["recovery pass"]["doing"] == "recovery step 'broker'"
    older.beat_once()
    assert older.leader, "leading again once its pass returned"


def test_a_beat_reports_the_parts_and_the_recorder_backlog() -> None:
    watched = Supervisor()
    watched.add(Part("recorder", 10.0))
    heart = Heart(watched, backlog=lambda: 42)
    heart.beat_once()
    heart.beat_once()
    row = Heartbeat.objects.get(name=heart.name)
    assert (row.backlog, row.leader, row.can_lead) == (42, True, True)
    assert row.parts == {"recorder": {"alive": True, "busy_for": 0.0, "stuck": False, "doing": ""}}


def test_an_unfit_process_beats_no_more() -> None:
    watched = Supervisor()
    heart = Heart(watched)
    heart.beat_once()
    Heartbeat.objects.filter(name=heart.name).update(beat_at=ago(30))
    watched.broken = "the event loop has been stuck for 12 s"
    heart.beat_once()
    assert Heartbeat.objects.get(name=heart.name).beat_at < ago(29)

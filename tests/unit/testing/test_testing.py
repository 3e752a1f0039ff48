"""django_outbox.testing, recording: what is recorded, when, and that Celery is left alone."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.test import TestCase, override_settings
from django.urls import path
from django.utils import timezone

from django_outbox import outbox
from django_outbox.broker.publish import DELIVER, EXPAND, publish
from django_outbox.models import Delivery, DeliveryState, Lane
from django_outbox.sending.batch import Batch
from django_outbox.signals import delivery_settled
from django_outbox.testing import CaptureEnded, captured_sends
from django_outbox.testing.capture import OutboxCapture
from testproject.demo.keys import ACTOR, ED_ACTOR
from tests.support.receivers import ACTIVITY, receiving, unreachable_broker
from tests.support.sends import inboxes

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.django_db
Capture = Callable[..., Any]  # pytest-django's django_capture_on_commit_callbacks


def publish_note(request: HttpRequest) -> HttpResponse:
    """A view as an application writes it: the note is sent to its followers on commit."""
    with transaction.atomic():
        outbox.send(ACTOR, ACTIVITY, inboxes(3, "view"), batch=Batch(tag="note-1"))
        if request.POST.get("fail"):
            transaction.set_rollback(True)
    return HttpResponse(status=201)


urlpatterns = [path("notes/", publish_note)]


@pytest.fixture(name="unreachable_broker")
def unreachable_broker_fixture() -> Iterator[Celery]:
    with unreachable_broker() as app:
        yield app


def test_records_what_a_committed_send_wrote(
    django_capture_on_commit_callbacks: Capture,
) -> None:
    deadline = timezone.now() + timedelta(hours=1)
    batch = Batch(tag="move-42", deadline=deadline, ordering_key="note-7", max_attempts=3)
    targets = inboxes(2, "record")
    with captured_sends() as sent, django_capture_on_commit_callbacks(execute=True):
        message = outbox.send(ED_ACTOR, ACTIVITY, targets, batch=batch)
    assert len(sent) == 1
    send = sent[0]
    assert send.message == message
    assert send.actor == ED_ACTOR
    assert send.activity == ACTIVITY
    assert send.type == "Create"
    assert send.inboxes == targets == sent.inboxes
    assert send.batch == batch
    assert list(send.deliveries().values_list("inbox", flat=True)) == targets
    assert sent.tasks[0].name == DELIVER
    assert sent.tasks[0].queue == Lane.PRIORITY
    assert sorted(sent.tasks[0].args[0]) == sorted(d.pk for d in send.deliveries())


def test_helpers_select_and_clear(django_capture_on_commit_callbacks: Capture) -> None:
    follow = {"type": "Follow", "actor": ACTOR, "object": "https://b.example/users/bob"}
    with captured_sends() as sent, django_capture_on_commit_callbacks(execute=True):
        outbox.send(ACTOR, ACTIVITY, inboxes(2, "helpers"))
        outbox.send(ED_ACTOR, follow, ["https://b.example/users/bob/inbox"])
    assert [s.type for s in sent] == ["Create", "Follow"]
    assert sent.activities(type="Follow") == [follow]
    assert sent.activities() == [ACTIVITY, follow]
    assert sent.filter(actor=ED_ACTOR) == [sent[1]]
    assert sent.filter(inbox="https://b.example/users/bob/inbox") == [sent[1]]
    assert sent.inboxes == [*inboxes(2, "helpers"), "https://b.example/users/bob/inbox"]
    sent.clear()
    assert len(sent) == 0
    assert sent.tasks == []


def test_a_send_rolled_back_is_not_recorded(django_capture_on_commit_callbacks: Capture) -> None:
    with captured_sends() as sent, django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            outbox.send(ACTOR, ACTIVITY, inboxes(2, "rolled-back"))
            transaction.set_rollback(True)
        outbox.send(ACTOR, ACTIVITY, inboxes(1, "kept"))
    assert [s.inboxes for s in sent] == [inboxes(1, "kept")]
    assert len(sent.tasks) == 1
    assert "1 not committed" in repr(sent)


def test_until_commit_nothing_is_recorded_and_the_repr_says_why() -> None:
    with captured_sends() as sent:
        outbox.send(ACTOR, ACTIVITY, inboxes(1, "uncommitted"))
    assert len(sent) == 0
    assert sent.tasks == []
    assert "1 not committed" in repr(sent)
    assert "captureOnCommitCallbacks(execute=True)" in repr(sent)


@pytest.mark.django_db(transaction=True)
def test_real_commit_and_rollback_without_a_test_transaction() -> None:
    class Failed(Exception):
        pass

    def failing_view() -> None:
        with transaction.atomic():
            outbox.send(ACTOR, ACTIVITY, inboxes(2, "raised"))
            raise Failed

    with captured_sends() as sent:
        outbox.send(ACTOR, ACTIVITY, inboxes(2, "autocommit"))
        with pytest.raises(Failed):
            failing_view()
    assert [s.inboxes for s in sent] == [inboxes(2, "autocommit")]
    assert Delivery.objects.count() == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("unreachable_broker")
def test_the_broker_is_never_contacted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="django_outbox.dispatch")
    # Without a capture, publishing reaches for the broker and fails.
    assert publish({Lane.DEFAULT.value: [1]}) is False
    assert "could not publish" in caplog.text
    caplog.clear()
    started = time.monotonic()
    with captured_sends() as sent, override_settings(OUTBOX_INLINE_FANOUT=2):
        outbox.send(ACTOR, ACTIVITY, inboxes(2, "no-broker"))
        outbox.send(ACTOR, ACTIVITY, inboxes(3, "no-broker-fanout"))
        assert publish({Lane.DEFAULT.value: [1]}) is True
    assert time.monotonic() - started < 1.0
    assert caplog.text == ""
    assert [task.name for task in sent.tasks] == [DELIVER, EXPAND, DELIVER]
    # Nothing was marked undispatched, as a failed publish would.
    assert not Delivery.objects.filter(dispatched_at__isnull=True).exists()


def test_a_large_fan_out_is_recorded_with_all_its_inboxes(
    django_capture_on_commit_callbacks: Capture,
) -> None:
    targets = inboxes(4, "fan-out")
    with (
        override_settings(OUTBOX_INLINE_FANOUT=2),
        captured_sends() as sent,
        django_capture_on_commit_callbacks(execute=True),
    ):
        outbox.send(ACTOR, ACTIVITY, targets)
    assert sent.inboxes == targets
    assert [(t.name, t.args) for t in sent.tasks] == [(EXPAND, (sent[0].message.pk,))]
    rows = sent.deliver_all()
    assert [row.inbox for row in rows] == targets
    assert {row.state for row in rows} == {DeliveryState.DELIVERED}


def test_a_send_that_commits_after_the_block_is_stopped(
    unreachable_broker: Celery,
    django_capture_on_commit_callbacks: Capture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="django_outbox.dispatch")
    with (
        pytest.raises(CaptureEnded, match="committed after the block ended"),
        django_capture_on_commit_callbacks(execute=True),
        captured_sends() as sent,
    ):
        outbox.send(ACTOR, ACTIVITY, inboxes(1, "late"))
    assert len(sent) == 0
    # The commit stopped before its publishing callback: the broker was not tried.
    assert caplog.text == ""


def test_the_fixture_captures(
    outbox_capture: OutboxCapture, django_capture_on_commit_callbacks: Capture
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        outbox.send(ACTOR, ACTIVITY, inboxes(1, "fixture"))
    assert outbox_capture.inboxes == inboxes(1, "fixture")


def test_importing_the_package_does_not_import_pytest() -> None:
    code = (
        "import django, sys; django.setup(); import django_outbox.testing; "
        "assert 'pytest' not in sys.modules, 'imported pytest'; "
        "import django_outbox.testing.pytest_plugin; assert 'pytest' in sys.modules"
    )
    env = {"DJANGO_SETTINGS_MODULE": "testproject.settings", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@override_settings(ROOT_URLCONF=__name__)
class DjangoTestCaseTests(TestCase):
    """The same tools from a Django ``TestCase``, whose transaction never commits."""

    def test_a_view_sends_a_create_to_the_followers(self) -> None:
        with captured_sends() as sent, self.captureOnCommitCallbacks(execute=True):
            response = self.client.post("/notes/")
        assert response.status_code == 201
        assert [s.type for s in sent] == ["Create"]
        assert sent[0].inboxes == inboxes(3, "view")
        assert sent[0].batch.tag == "note-1"

    def test_a_rolled_back_view_sends_nothing(self) -> None:
        with captured_sends() as sent, self.captureOnCommitCallbacks(execute=True):
            self.client.post("/notes/", {"fail": "1"})
        assert len(sent) == 0
        assert sent.tasks == []

    def test_delivering_runs_the_settled_receivers(self) -> None:
        with captured_sends() as sent, self.captureOnCommitCallbacks(execute=True):
            self.client.post("/notes/")
        with receiving(delivery_settled) as settled:
            rows = sent.deliver_all()
        assert [kw["inbox"] for kw in settled] == inboxes(3, "view")
        assert {kw["outcome"] for kw in settled} == {"delivered"}
        assert {kw["tag"] for kw in settled} == {"note-1"}
        assert {row.state for row in rows} == {DeliveryState.DELIVERED}
        assert sent.inbox.urls == inboxes(3, "view")

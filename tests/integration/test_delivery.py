"""End to end: send, a real Celery worker process, real Redis, loopback inboxes."""

from __future__ import annotations

import re
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from django_outbox import Batch, outbox
from django_outbox.broker.backlog import header
from django_outbox.models import Delivery
from django_outbox.tasks import deliver
from testproject.demo.keys import ACTOR, ED_ACTOR
from testproject.demo.models import SignalLog
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.verifiers import verify_cavage, verify_rfc9421
from tests.support.waiting import settled, wait_for
from tests.support.workers import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.broker]

NOTE = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Create", "id": "n1"}


def rsa_pem() -> str:
    return (Path(settings.RUN_DIR) / "rsa.pem").read_text()


def test_fan_out_to_200_inboxes_arrives_once_each_with_valid_signatures(worker: Worker) -> None:
    servers = [InboxServer().start() for _ in range(4)]
    try:
        inboxes = [s.url(f"/users/{n}/inbox") for s in servers for n in range(50)]
        outbox.send(ACTOR, NOTE, inboxes, batch=Batch(tag="fan-out"))
        settled(200)
        assert Counter(Delivery.objects.values_list("state", flat=True)) == {"delivered": 200}
        received = [r for s in servers for r in s.requests()]
        assert len(received) == 200
        assert len({(r.headers["Host"], r.path) for r in received}) == 200
        pem = rsa_pem()
        assert all(verify_cavage(r, pem) for r in received)
        assert all(r.body == received[0].body for r in received)
    finally:
        for server in servers:
            server.stop()


def test_a_cavage_signature_with_another_body_does_not_verify(
    worker: Worker, inbox_server: InboxServer
) -> None:
    outbox.send(ACTOR, NOTE, [inbox_server.url()])
    settled(1)
    (request,) = inbox_server.requests()
    assert verify_cavage(request, rsa_pem())
    forged = type(request)(**{**request.__dict__, "body": request.body + b" "})
    assert not verify_cavage(forged, rsa_pem())


def test_an_rfc9421_only_inbox_gets_the_second_knock_and_the_host_is_remembered(
    worker: Worker, inbox_server: InboxServer
) -> None:
    inbox_server.behave("/a", Behaviour.accept_only("rfc9421"))
    inbox_server.behave("/b", Behaviour.accept_only("rfc9421"))
    outbox.send(ACTOR, NOTE, [inbox_server.url("/a")])
    settled(1)
    first = inbox_server.requests("/a")
    assert [r.status for r in first] == [401, 202]
    assert "Signature-Input" not in first[0].headers
    assert verify_rfc9421(first[1], inbox_server.url("/a"), rsa_pem(), f"{ACTOR}#main-key")
    outbox.send(ACTOR, NOTE, [inbox_server.url("/b")])
    settled(2)
    assert [r.status for r in inbox_server.requests("/b")] == [202]  # remembered


def test_ed25519_actor_signs_with_rfc9421(worker: Worker, inbox_server: InboxServer) -> None:
    inbox_server.behave("/inbox", Behaviour.accept_only("rfc9421"))
    outbox.send(ED_ACTOR, NOTE, [inbox_server.url()])
    settled(1)
    accepted = [r for r in inbox_server.requests() if r.status == 202]
    pem = (Path(settings.RUN_DIR) / "ed25519.pem").read_text()
    assert verify_rfc9421(accepted[0], inbox_server.url(), pem, f"{ED_ACTOR}#ed25519-key")


def test_500_then_202_is_retried_and_delivered(worker: Worker, inbox_server: InboxServer) -> None:
    inbox_server.behave("/inbox", Behaviour(statuses=(500, 202)))
    outbox.send(ACTOR, NOTE, [inbox_server.url()])
    settled(1)
    row = Delivery.objects.get()
    assert (row.state, row.attempts, row.last_status) == ("delivered", 2, 202)
    assert [r.status for r in inbox_server.requests()] == [500, 202]
    signals = list(SignalLog.objects.order_by("id").values_list("signal", "outcome", "status"))
    assert signals == [
        ("attempted", "retry", 500),
        ("attempted", "delivered", 202),
        ("settled", "delivered", 202),
    ]


def test_a_long_retry_after_is_honoured(worker: Worker, inbox_server: InboxServer) -> None:
    inbox_server.behave("/inbox", Behaviour(statuses=(503,), headers={"Retry-After": "120"}))
    outbox.send(ACTOR, NOTE, [inbox_server.url()])
    row = wait_for(lambda: Delivery.objects.filter(last_status=503, state="queued").first())
    (request,) = inbox_server.requests()
    # Two minutes after the answer, as asked, not the retry schedule's half second.
    wait = row.next_attempt_at.timestamp() - request.received_at
    assert 119.9 < wait < 122
    time.sleep(2)
    assert len(inbox_server.requests()) == 1
    assert Delivery.objects.get().state == "queued"


def test_a_retry_after_of_two_seconds_is_sent_after_two_seconds(
    worker: Worker, inbox_server: InboxServer
) -> None:
    """A wait shorter than OUTBOX_COUNTDOWN_LIMIT rides on a Celery countdown: no sweeper
    runs in these tests, so a delivery left to one would never be sent again."""
    inbox_server.behave("/inbox", Behaviour(statuses=(503, 202), headers={"Retry-After": "2"}))
    outbox.send(ACTOR, NOTE, [inbox_server.url()])
    settled(1, timeout=20)
    first, second = inbox_server.requests()
    assert (first.status, second.status) == (503, 202)
    assert 1.9 < second.received_at - first.received_at < 5
    row = Delivery.objects.get()
    assert (row.state, row.attempts) == ("delivered", 2)


def test_a_task_for_deliveries_not_due_yet_retries_itself_until_they_are(
    worker: Worker, inbox_server: InboxServer
) -> None:
    """The ``deliver`` task finds its delivery not due (as after a Retry-After stored on
    the row) and retries itself with a countdown to the due time: ``self.retry``,
    published without raising (``throw=False``): the task's one id runs twice, and
    succeeds twice."""
    log_before = len(worker.log())
    with transaction.atomic():
        outbox.send(ACTOR, NOTE, [inbox_server.url()])
        due = timezone.now() + timedelta(seconds=2)
        Delivery.objects.update(next_attempt_at=due)
    settled(1, timeout=20)
    (request,) = inbox_server.requests()
    assert -0.05 < request.received_at - due.timestamp() < 3
    row = Delivery.objects.get()
    assert (row.state, row.attempts) == ("delivered", 1), "finding it not due spent nothing"
    ran = re.findall(
        r"Task django_outbox\.deliver\[([0-9a-f-]+)\] succeeded", worker.log()[log_before:]
    )
    assert any(ran.count(task_id) == 2 for task_id in ran), ran


def test_a_message_older_than_its_deliverys_last_dispatch_leaves_it_to_the_newer_one(
    worker: Worker, inbox_server: InboxServer
) -> None:
    """Two more messages for a delivery that waits out a ``Retry-After`` (its countdown
    message published, its row stamped): one published before that stamp hands the
    delivery over and ends (its id runs once); one published after it retries itself to
    the due time (its id runs twice).  The delivery is sent once more, not three times."""
    inbox_server.behave("/inbox", Behaviour(statuses=(503, 202), headers={"Retry-After": "3"}))
    outbox.send(ACTOR, NOTE, [inbox_server.url()])
    row = wait_for(lambda: Delivery.objects.filter(last_status=503, state="queued").first())
    assert row.dispatched_at is not None and row.next_attempt_at > timezone.now()
    log_before = len(worker.log())
    stamped = row.dispatched_at.timestamp()
    older = deliver.apply_async(([row.pk],), queue="outbox", headers=header(row.pk, stamped - 1))
    newer = deliver.apply_async(([row.pk],), queue="outbox", headers=header(row.pk, time.time()))
    settled(1, timeout=20)
    time.sleep(1)  # the retried message runs at the due time too, and finds it taken
    succeeded = re.findall(
        r"Task django_outbox\.deliver\[([0-9a-f-]+)\] succeeded", worker.log()[log_before:]
    )
    assert succeeded.count(older.id) == 1, "no retry: the delivery has a newer message"
    assert succeeded.count(newer.id) == 2, "retried once, to the due time"
    assert [r.status for r in inbox_server.requests()] == [503, 202]
    assert Delivery.objects.get().attempts == 2


def test_410_is_refused_once_and_the_signals_say_so(
    worker: Worker, inbox_server: InboxServer
) -> None:
    inbox_server.behave("/inbox", Behaviour(statuses=(410,)))
    outbox.send(ACTOR, NOTE, [inbox_server.url()], batch=Batch(tag="gone-test"))
    settled(1)
    row = Delivery.objects.get()
    assert (row.state, row.attempts, row.last_status) == ("refused", 1, 410)
    wait_for(lambda: SignalLog.objects.filter(signal="failed").exists())
    time.sleep(1)
    assert len(inbox_server.requests()) == 1
    logs = {log.signal: log for log in SignalLog.objects.all()}
    assert set(logs) == {"attempted", "settled", "failed"}
    assert (logs["settled"].outcome, logs["settled"].status, logs["settled"].tag) == (
        "refused",
        410,
        "gone-test",
    )
    failed = logs["failed"]
    assert (failed.inbox, failed.actor, failed.status, failed.tag, failed.deadline) == (
        inbox_server.url(),
        ACTOR,
        410,
        "gone-test",
        False,
    )


def test_max_attempts_runs_out(worker: Worker, inbox_server: InboxServer) -> None:
    inbox_server.behave("/inbox", Behaviour(statuses=(500,)))
    outbox.send(ACTOR, NOTE, [inbox_server.url()], batch=Batch(max_attempts=2))
    settled(1)
    row = Delivery.objects.get()
    assert (row.state, row.attempts, row.deadline_reached) == ("failed", 2, False)
    assert len(inbox_server.requests()) == 2
    failed = wait_for(lambda: SignalLog.objects.filter(signal="failed").first())
    assert (failed.status, failed.deadline) == (500, False)


def test_a_deadline_in_the_past_gives_up_without_a_request(
    worker: Worker, inbox_server: InboxServer
) -> None:
    past = timezone.now() - timedelta(seconds=1)
    outbox.send(ACTOR, NOTE, [inbox_server.url()], batch=Batch(deadline=past, tag="late"))
    settled(1)
    row = Delivery.objects.get()
    assert (row.state, row.deadline_reached, row.attempts) == ("failed", True, 0)
    failed = wait_for(lambda: SignalLog.objects.filter(signal="failed").first())
    assert (failed.deadline, failed.tag, failed.status) == (True, "late", None)
    assert inbox_server.requests() == []


def test_a_retry_that_would_pass_the_deadline_is_given_up(
    worker: Worker, inbox_server: InboxServer
) -> None:
    inbox_server.behave("/inbox", Behaviour(statuses=(503,), headers={"Retry-After": "60"}))
    deadline = timezone.now() + timedelta(seconds=30)
    outbox.send(ACTOR, NOTE, [inbox_server.url()], batch=Batch(deadline=deadline))
    settled(1)
    row = Delivery.objects.get()
    assert (row.state, row.deadline_reached, row.last_status) == ("failed", True, 503)
    assert len(inbox_server.requests()) == 1


def test_a_rolled_back_view_sends_nothing(worker: Worker, inbox_server: InboxServer) -> None:
    def view() -> None:
        with transaction.atomic():
            outbox.send(ACTOR, NOTE, [inbox_server.url()])
            raise RuntimeError("the view failed")

    with pytest.raises(RuntimeError):
        view()
    time.sleep(2)
    assert inbox_server.requests() == []
    assert Delivery.objects.count() == 0


def test_a_duplicated_celery_message_sends_once(worker: Worker, inbox_server: InboxServer) -> None:
    inbox_server.behave("/inbox", Behaviour(delay=1.0))
    outbox.send(ACTOR, NOTE, [inbox_server.url()])
    row = Delivery.objects.get()
    for _ in range(5):
        deliver.apply_async(([row.pk],), queue="outbox")
    settled(1)
    time.sleep(2)
    assert len(inbox_server.requests()) == 1
    assert Delivery.objects.get().attempts == 1

"""Whatever a task claims gets an outcome or is given back, on every path out of the claim:
an application function that raises or hangs, an exception while a claim is prepared,
a claim whose answer is lost, a process that cannot go on."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from celery.exceptions import Reject
from django.db import OperationalError
from django.test import override_settings
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from django_outbox.tasks import deliver
from django_outbox.worker import claiming
from django_outbox.worker.claiming import run_deliveries
from django_outbox.worker.process import ProcessUnfit, WorkerProcess, this_process
from testproject.demo.keys import resolve
from testproject.inbox_servers import InboxServer
from tests.support.in_process import running, settle
from tests.support.rows import delivery, message

pytestmark = pytest.mark.django_db(transaction=True)

OTHER = "https://elsewhere.example/users/purged"


def found(pk: int) -> tuple[str, int, str]:
    row = Delivery.objects.get(pk=pk)
    return row.state, row.attempts, row.last_error


def test_a_resolver_that_raises_for_one_sender_retries_its_deliveries_and_sends_the_rest(
    worker_process: None, inbox_server: InboxServer
) -> None:
    def resolver(sender: str) -> Any:
        if sender == OTHER:
            raise LookupError("Actor matching query does not exist.")
        return resolve(sender)

    good = delivery(message(), inbox=inbox_server.url("/good"))
    bad = delivery(message(sender=OTHER), inbox=inbox_server.url("/bad"))
    with override_settings(OUTBOX_KEY_RESOLVER=resolver):
        assert run_deliveries([good.pk, bad.pk]) is None
        settle()
    assert found(good.pk)[0] == DeliveryState.DELIVERED
    assert found(bad.pk) == (
        DeliveryState.QUEUED,
        1,
        "internal: preparing the delivery: LookupError: Actor matching query does not exist.",
    )
    assert [r.path for r in inbox_server.requests()] == ["/good"]
    retry_in = (Delivery.objects.get(pk=bad.pk).next_attempt_at - timezone.now()).total_seconds()
    assert 0 < retry_in <= 5  # an internal error comes back soon


def test_a_resolver_that_hangs_gives_its_deliveries_an_internal_error_in_bounded_time(
    worker_process: None, inbox_server: InboxServer
) -> None:
    release = threading.Event()

    def resolver(sender: str) -> Any:
        release.wait(10)
        return resolve(sender)

    row = delivery(message(), inbox=inbox_server.url("/slow"))
    started = time.monotonic()
    with override_settings(OUTBOX_KEY_RESOLVER=resolver, OUTBOX_STALL_TIMEOUT=1.0):
        try:
            assert run_deliveries([row.pk]) is None
            settle()
        finally:
            release.set()
    assert time.monotonic() - started < 5
    assert found(row.pk) == (
        DeliveryState.QUEUED,
        1,
        "internal: preparing the delivery: CallbackTimedOut: "
        "OUTBOX_KEY_RESOLVER did not answer within 0.5 s",
    )


def test_an_exception_after_the_claim_gives_each_row_an_internal_error(
    worker_process: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [delivery(message()) for _ in range(3)]

    def broken(self: WorkerProcess, claimed: Any) -> Any:
        self.messages(row.message_id for row in claimed)
        raise RuntimeError("between two steps")

    monkeypatch.setattr(WorkerProcess, "jobs_for", broken)
    assert run_deliveries([row.pk for row in rows]) is None
    settle()
    for row in rows:
        assert found(row.pk) == (
            DeliveryState.QUEUED,
            1,
            "internal: preparing the claim: RuntimeError: between two steps",
        )


def test_without_its_messages_a_claim_that_failed_is_given_back_for_later(
    worker_process: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = delivery(message())

    def broken(self: WorkerProcess, claimed: Any) -> Any:
        raise RuntimeError("before anything was read")

    monkeypatch.setattr(WorkerProcess, "jobs_for", broken)
    monkeypatch.setattr(WorkerProcess, "messages", broken)
    assert run_deliveries([row.pk]) is None
    settle()
    back = Delivery.objects.get(pk=row.pk)
    assert (back.state, back.attempts, back.claimed_by, back.dispatched_at) == (
        "queued",
        0,
        "",
        None,
    )
    assert (
        back.last_error == "internal: preparing the claim: RuntimeError: before anything was read"
    )
    assert 3 < (back.next_attempt_at - timezone.now()).total_seconds() <= 5


def test_a_claim_whose_answer_was_lost_is_given_back_once_the_database_answers(
    worker_process: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = delivery(message())
    real_claim = claiming.claim

    def lost(ids: list[int], token: str) -> Any:
        real_claim(ids, token)  # committed, but the answer never arrives
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(claiming, "claim", lost)
    with pytest.raises(OperationalError):
        run_deliveries([row.pk])
    settle()
    assert found(row.pk) == (DeliveryState.QUEUED, 0, "")


def test_an_unfit_process_claims_nothing_and_hands_the_message_back(worker_process: None) -> None:
    row = delivery(message())
    supervisor = this_process().supervisor
    supervisor.broken = "the recorder has been stuck for 11 s"
    try:
        with pytest.raises(ProcessUnfit):
            run_deliveries([row.pk])
        with running([row.pk]), pytest.raises(Reject) as rejected:
            deliver.run([row.pk])
        assert rejected.value.requeue
    finally:
        supervisor.broken = ""
    assert found(row.pk) == (DeliveryState.QUEUED, 0, "")


def test_a_claims_lease_is_set_and_judged_by_the_database_clock() -> None:
    from django_outbox.store import reclaim
    from django_outbox.store.transitions import claim

    row = delivery(message())
    assert [r.id for r in claim([row.pk], "t-lease")] == [row.pk]
    lease = Delivery.objects.get(pk=row.pk).lease_until
    assert lease is not None
    ahead = (lease - timezone.now()).total_seconds()
    assert 295 < ahead <= 301
    assert not reclaim.lapsed().filter(pk=row.pk).exists()
    Delivery.objects.filter(pk=row.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert reclaim.lapsed().filter(pk=row.pk).exists()

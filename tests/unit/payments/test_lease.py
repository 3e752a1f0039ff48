"""Paying within the lease, on payment threads of its own.

A payment step (lookup, pay, lookup) starts only while what is left of the
delivery's lease covers it and the request after it; its node calls run on the
process's payment threads, at most ``CLIENT_THREADS`` at once, never on the event
loop's default executor, which every other delivery's look-ups share.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from django.test import override_settings

from django_outbox.checks import check_settings
from django_outbox.conf import conf
from django_outbox.payments import extension
from django_outbox.payments.clients import Payment, PaymentStatus
from django_outbox.payments.clients.lnd import LndRestClient
from django_outbox.payments.paying import Exchange, PaymentJob, exchange
from django_outbox.payments.reports import OpenAttempt
from django_outbox.payments.settings import read_payments
from django_outbox.payments.settling import ASSUMED_TIMEOUT, payment_seconds
from django_outbox.payments.threads import payment_threads, stop_payment_threads
from django_outbox.transport import Response
from django_outbox.values.outcomes import AttemptResult
from django_outbox.worker import lifecycle
from testproject.lightning.l402_inbox import L402Gate
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode
from tests.support.payment_rounds import payments
from tests.unit.payments.test_paying import (
    BODY_SIZE,
    SETTINGS,
    URL,
    Inbox,
    challenge_from,
    exchanged,
    job,
    stored,
)


@pytest.fixture
def gate(issuer: Any) -> L402Gate:
    return L402Gate(issuer, price_msat=None)


def pending(lnd: FakeLndServer, inbox: Inbox, url: str = URL) -> OpenAttempt:
    """The pending attempt the ledger stores for the 402 ``inbox`` answers at ``url``."""
    return stored(challenge_from(exchanged(job(lnd), url, BODY_SIZE, inbox)))


# -- the lease ------------------------------------------------------------------------


def test_the_payment_and_its_request_are_three_node_calls_two_knocks_and_a_margin() -> None:
    client = LndRestClient("http://127.0.0.1:9", macaroon_hex="00", timeout=5)
    assert payment_seconds(client) == 3 * 5 + 2 * conf.TOTAL_TIMEOUT + 10

    class Quiet:  # a client that says nothing of its timeout
        def pay(self, invoice: str, amount_msat: int | None, max_fee_msat: int) -> Payment: ...
        def lookup(self, payment_hash: str) -> PaymentStatus: ...

    assert payment_seconds(Quiet()) == 3 * ASSUMED_TIMEOUT + 2 * conf.TOTAL_TIMEOUT + 10


def test_a_payment_does_not_start_when_the_lease_left_cannot_cover_it(
    lnd: FakeLndServer, node: FakeNode, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    attempt = pending(lnd, inbox)
    calls = len(lnd.calls)
    short = job(lnd, open=attempt, lease=payment_seconds(job(lnd).client) - 1)
    done = exchanged(short, URL, BODY_SIZE, inbox)
    assert done.result is AttemptResult.RELEASED
    assert done.error.startswith("released: ") and "cannot cover a payment" in done.error
    assert done.report is None  # the attempt stays pending, for the next claim
    assert len(lnd.calls) == calls  # not even a lookup
    assert inbox.sent == [None]  # nothing sent after the 402
    again = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, inbox)
    assert again.response is not None and again.response.status == 202
    assert len(node.payments()) == 1


def test_waiting_for_a_payment_thread_counts_against_the_lease(
    lnd: FakeLndServer, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    attempt = pending(lnd, inbox)
    one_thread = replace(SETTINGS, client_threads=1)
    busy = payment_threads(one_thread).submit(time.sleep, 1.0)
    tight = job(lnd, open=attempt, lease=payment_seconds(job(lnd).client) + 0.5)
    done = exchanged(replace(tight, settings=one_thread), URL, BODY_SIZE, inbox)
    assert busy.done()  # it started once the thread was free, with less than it needs left
    assert done.result is AttemptResult.RELEASED


def test_a_lease_too_short_for_any_payment_retries_and_says_why(
    lnd: FakeLndServer, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    attempt = pending(lnd, inbox)
    calls = len(lnd.calls)
    with override_settings(OUTBOX_LEASE_SECONDS=60):
        done = exchanged(job(lnd, open=attempt), URL, BODY_SIZE, inbox)
    assert done.result is AttemptResult.RETRY  # spends an attempt: it cannot go on for ever
    assert done.error.startswith("internal: a payment and its request may take 85 s")
    assert len(lnd.calls) == calls


def test_a_paid_attempt_needs_no_node_call_and_no_room_for_one(
    lnd: FakeLndServer, gate: L402Gate
) -> None:
    inbox = Inbox(gate)
    attempt = pending(lnd, inbox)
    payment = job(lnd).client.pay(attempt.invoice, attempt.pay_amount_msat, 100)
    paid = replace(attempt, state="paid", preimage=payment.preimage.hex())
    done = exchanged(job(lnd, open=paid, lease=1.0), URL, BODY_SIZE, inbox)
    assert done.response is not None and done.response.status == 202


@pytest.mark.django_db
def test_the_claim_gives_each_job_the_end_of_its_lease(lnd: FakeLndServer) -> None:
    from django_outbox.payments.claims import payment_jobs
    from django_outbox.values.claimed import ClaimedRow, MessageData

    row = ClaimedRow(1, 1, URL, "paid.example", [], "outbox", "", 1, "t")
    message = MessageData(1, "https://a.example/actor", b"{}", b"", "", None, "", False, 16)
    before = time.monotonic()
    with override_settings(OUTBOX_PAYMENTS=payments(lnd)):
        jobs, _ = payment_jobs([row], {1: message})
    after = time.monotonic()
    assert before + conf.LEASE_SECONDS <= jobs[1].lease_ends <= after + conf.LEASE_SECONDS


# -- the payment threads ------------------------------------------------------------------


@dataclass
class Watched:
    """A client that takes ``seconds`` for each call and notes where and how many at once."""

    inner: LndRestClient
    seconds: float = 0.0
    timeout: float = 5.0
    threads: set[str] = field(default_factory=set)
    most: int = 0
    ended: list[float] = field(default_factory=list)
    _now: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def _call(self) -> Iterator[None]:
        with self._lock:
            self._now += 1
            self.most = max(self.most, self._now)
            self.threads.add(threading.current_thread().name)
        try:
            time.sleep(self.seconds)
            yield
        finally:
            with self._lock:
                self._now -= 1
                self.ended.append(time.monotonic())

    def pay(self, invoice: str, amount_msat: int | None, max_fee_msat: int) -> Payment:
        with self._call():
            return self.inner.pay(invoice, amount_msat, max_fee_msat)

    def lookup(self, payment_hash: str) -> PaymentStatus:
        with self._call():
            return self.inner.lookup(payment_hash)


def paid_at_once(
    lnd: FakeLndServer, gate: L402Gate, client: Watched, count: int, threads: int
) -> Callable[[], list[Exchange]]:
    """``count`` deliveries to hosts of their own, each with a pending attempt; the
    coroutine function that makes their attempts at once."""
    urls = [f"https://paid{n}.example/inbox" for n in range(count)]
    inboxes = [Inbox(gate) for _ in urls]
    attempts = [pending(lnd, inbox, url) for inbox, url in zip(inboxes, urls, strict=True)]
    settings = replace(SETTINGS, client_threads=threads)

    def post(inbox: Inbox) -> Callable[[str | None], Any]:
        async def knock(authorization: str | None) -> Response:
            return inbox(authorization)

        return knock

    async def attempts_at_once() -> list[Exchange]:
        return list(
            await asyncio.gather(
                *(
                    exchange(
                        PaymentJob(settings, client, time.monotonic() + 300, attempt),  # type: ignore[arg-type]
                        url,
                        BODY_SIZE,
                        post(inbox),
                    )
                    for attempt, url, inbox in zip(attempts, urls, inboxes, strict=True)
                )
            )
        )

    return attempts_at_once  # type: ignore[return-value]


def test_node_calls_run_on_the_payment_threads_at_most_client_threads_at_once(
    lnd: FakeLndServer, gate: L402Gate
) -> None:
    client = Watched(job(lnd).client, seconds=0.2)  # type: ignore[arg-type]
    done = asyncio.run(paid_at_once(lnd, gate, client, count=5, threads=2)())
    assert all(d.response is not None and d.response.status == 202 for d in done)
    assert client.most == 2
    assert {name.split("_")[0] for name in client.threads} == {"outbox-payments"}


def test_a_slow_node_leaves_the_loops_default_executor_to_everything_else(
    lnd: FakeLndServer, gate: L402Gate
) -> None:
    """Eight payments whose node calls each take a second, then twenty look-ups on the
    default executor (6 threads here): all of them end before any node call does."""
    client = Watched(job(lnd).client, seconds=1.0)  # type: ignore[arg-type]
    payments_at_once = paid_at_once(lnd, gate, client, count=8, threads=8)
    looked_up: list[float] = []

    async def both() -> None:
        paying_now = asyncio.ensure_future(payments_at_once())
        await asyncio.sleep(0.1)  # every payment is at its node by now
        loop = asyncio.get_running_loop()
        for _ in range(20):
            await loop.run_in_executor(None, lambda: looked_up.append(time.monotonic()))
        await paying_now

    asyncio.run(both())
    assert len(looked_up) == 20
    assert max(looked_up) < min(client.ended)


def test_stopping_the_payment_threads_cancels_the_calls_that_wait_for_one() -> None:
    settings = replace(SETTINGS, client_threads=1)
    first = payment_threads(settings)
    running = first.submit(time.sleep, 0.3)
    waiting = first.submit(time.sleep, 0.3)
    stop_payment_threads()
    assert running.result(5) is None
    with pytest.raises(CancelledError):
        waiting.result(5)
    assert payment_threads(settings) is not first  # a later payment gets new threads


def test_a_worker_process_stops_its_payment_threads_as_it_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stopped: list[str] = []
    monkeypatch.setattr(lifecycle, "stop_this_process", lambda timeout: stopped.append("engine"))
    monkeypatch.setattr(extension, "stop_payment_threads", lambda: stopped.append("threads"))
    monkeypatch.setattr(lifecycle, "active", lambda: (extension.PAID_PUSH,))
    monkeypatch.setattr(lifecycle, "stop_heart", lambda: stopped.append("heart"))
    lifecycle.stop_worker_process(1.0)
    assert stopped == ["engine", "threads", "heart"]


# -- settings and checks ---------------------------------------------------------------


def test_client_threads_default_to_eight_and_are_checked(lnd: FakeLndServer) -> None:
    read = read_payments(payments(lnd))
    assert read is not None and read.client_threads == 8
    for wrong in (0, 2.5, 257):
        with override_settings(OUTBOX_PAYMENTS=payments(lnd, CLIENT_THREADS=wrong)):
            assert {m.id for m in check_settings()} >= {"django_outbox.E012"}


def test_a_lease_too_short_for_a_payment_is_e017(lnd: FakeLndServer) -> None:
    with override_settings(OUTBOX_PAYMENTS=payments(lnd)):
        assert "django_outbox.E017" not in {m.id for m in check_settings()}
        with override_settings(OUTBOX_LEASE_SECONDS=80):
            [found] = [m for m in check_settings() if m.id == "django_outbox.E017"]
    assert "(85 s: three calls" in found.msg


def test_the_default_clients_fit_the_default_lease() -> None:
    from django_outbox.payments.clients.cln import ClnClient

    for client in (LndRestClient("http://127.0.0.1:9", macaroon_hex="00"), ClnClient("x")):
        assert payment_seconds(client) <= 300

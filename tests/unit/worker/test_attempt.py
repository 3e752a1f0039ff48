"""One attempt with breakers off, and an attempt that fails inside the package.

``OUTBOX_BREAKER_THRESHOLD = 0`` turns circuit breakers off: every delivery goes
to its inbox and no breaker store is asked.  An exception raised while
attempting (a bug, a library's surprise) must not lose the delivery: the
sending thread records it as a retry with an ``internal:`` error.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from hashlib import sha256
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_outbox.breakers import BreakerPolicy, MemoryBreakerStore
from django_outbox.breakers.configured import configured_policy
from django_outbox.extensions import Exchange, Post
from django_outbox.models import Delivery, DeliveryState, Lane
from django_outbox.transport import Transport
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptResult, Outcome
from django_outbox.worker.attempt import Job, perform
from django_outbox.worker.claiming import run_deliveries
from django_outbox.worker.process import this_process
from testproject.demo.keys import ACTOR, resolve
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.broker import RecordingApp
from tests.support.in_process import settle
from tests.support.rows import delivery, message

FAILING = 12


class NoBreakers:
    """A breaker store that must not be asked: every call fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the breaker store was asked: {name}")


@pytest.fixture
def transport() -> Transport:
    return Transport(user_agent="outbox-test/1", allowed_networks=["127.0.0.0/8"])


def jobs(inbox_server: InboxServer, count: int) -> list[Job]:
    """``count`` claimed jobs to ``/down`` on one host (no rows: ``perform`` reads none)."""
    key = resolve(ACTOR)
    assert key is not None
    body = MessageData(
        1,
        ACTOR,
        b"{}",
        sha256(b"{}").digest(),
        "application/activity+json",
        None,
        "Create",
        False,
        16,
    )
    send_by = time.monotonic() + 60
    return [
        Job(
            ClaimedRow(
                n, 1, inbox_server.url(f"/down?n={n}"), "127.0.0.1", [], Lane.DEFAULT, "", 1, "t"
            ),
            body,
            key,
            send_by,
        )
        for n in range(count)
    ]


# -- breakers off --------------------------------------------------------------------


@pytest.mark.parametrize("threshold", [0, -1])
def test_a_threshold_of_nought_or_less_turns_breakers_off(threshold: int) -> None:
    with override_settings(OUTBOX_BREAKER_THRESHOLD=threshold):
        assert configured_policy() is None
    with override_settings(OUTBOX_BREAKER_THRESHOLD=3, OUTBOX_TOTAL_TIMEOUT=5):
        assert configured_policy() == BreakerPolicy(threshold=3, cool_off=60.0, answer_within=20)


@pytest.mark.parametrize(
    ("threshold", "store", "sent"),
    [(0, NoBreakers, FAILING), (3, MemoryBreakerStore, 3)],
    ids=["breakers off: no store is asked", "breakers on"],
)
def test_a_failing_host_is_held_after_the_threshold_unless_breakers_are_off(
    inbox_server: InboxServer, transport: Transport, threshold: int, store: type, sent: int
) -> None:
    inbox_server.behave("/down", Behaviour(statuses=(503,)))
    with override_settings(OUTBOX_BREAKER_THRESHOLD=threshold):
        policy = configured_policy()
    breakers = store()

    async def attempt_each() -> list[Outcome]:
        done = [
            await perform(job, transport, breakers, policy) for job in jobs(inbox_server, FAILING)
        ]
        transport.close()
        return done

    outcomes = asyncio.run(attempt_each())
    held = FAILING - sent
    expected = [AttemptResult.RETRY] * sent + [AttemptResult.HELD] * held
    assert [o.result for o in outcomes] == expected
    assert [o.status for o in outcomes] == [503] * sent + [None] * held
    assert len(inbox_server.requests()) == sent


@pytest.mark.django_db
def test_a_worker_process_with_breakers_off_has_no_policy(worker_process: None) -> None:
    with override_settings(OUTBOX_BREAKER_THRESHOLD=0):
        assert this_process().policy is None


# -- the internal: retry -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_exception_while_attempting_is_a_retry_and_the_next_attempt_sends(
    worker_process: None,
    inbox_server: InboxServer,
    broker: RecordingApp,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row = delivery(message(), inbox=inbox_server.url())

    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("django_outbox.worker.process.perform", broken)
    with override_settings(OUTBOX_RETRY_BASE=1.0, OUTBOX_RETRY_CAP=1.0):
        assert run_deliveries([row.pk]) is None
        settle()
    failed = Delivery.objects.get(pk=row.pk)
    assert (failed.state, failed.attempts, failed.claimed_by) == ("queued", 1, "")
    assert (failed.last_status, failed.last_error) == (
        None,
        "internal: the attempt: RuntimeError: boom",
    )
    assert inbox_server.requests() == []
    # Retried on a countdown (jitter shortens the second by up to a quarter).
    assert broker.countdowns() == {row.pk: 1}
    assert 0.7 < (failed.next_attempt_at - failed.created_at).total_seconds() < 3

    monkeypatch.setattr("django_outbox.worker.process.perform", perform)
    time.sleep(max(0.0, (failed.next_attempt_at - timezone.now()).total_seconds()))
    assert run_deliveries([row.pk]) is None
    settle()
    sent = Delivery.objects.get(pk=row.pk)
    assert (sent.state, sent.attempts, sent.last_status, sent.last_error) == (
        DeliveryState.DELIVERED,
        2,
        202,
        "",
    )
    assert len(inbox_server.requests()) == 1


def test_the_scheme_an_origin_accepted_reaches_the_shared_cache_with_the_batch(
    inbox_server: InboxServer, transport: Transport
) -> None:
    from django.core.cache import caches

    from django_outbox.conf import conf
    from django_outbox.signing.schemes import share_learnt
    from django_outbox.transport.target import parse_target

    job = jobs(inbox_server, 1)[0]
    origin = parse_target(job.row.inbox).origin
    cache = caches[conf.SCHEME_CACHE]
    key = f"django_outbox:scheme:{origin}"
    cache.delete(key)

    async def attempt() -> Outcome:
        done = await perform(job, transport, MemoryBreakerStore(), None)
        transport.close()
        return done

    assert asyncio.run(attempt()).result is AttemptResult.DELIVERED
    assert cache.get(key) is None  # told when the batch of outcomes is saved
    assert share_learnt() == 1
    assert cache.get(key) == conf.FIRST_SCHEME
    assert share_learnt() == 0


class _Ticket:
    """A ticket whose extension ends every attempt as ``answer`` says: a retry decided
    before any request (``post`` None), or after posting once."""

    urgent = False

    def __init__(self, post_first: bool) -> None:
        self.post_first = post_first

    async def exchange(self, url: str, size: int, post: Post) -> Exchange:
        if self.post_first:
            return Exchange(response=await post(None))
        return Exchange(result=AttemptResult.RETRY, error="payment client: the node is away")


@pytest.mark.parametrize(
    ("post_first", "sent"),
    [(False, 0), (True, 3)],
    ids=["a retry before any request is not the host's failure", "a 503 after posting is"],
)
def test_only_a_retry_after_a_request_counts_towards_the_hosts_breaker(
    inbox_server: InboxServer, transport: Transport, post_first: bool, sent: int
) -> None:
    inbox_server.behave("/down", Behaviour(statuses=(503,)))
    with override_settings(OUTBOX_BREAKER_THRESHOLD=3):
        policy = configured_policy()
    breakers = MemoryBreakerStore()
    ticket = _Ticket(post_first)

    async def attempt_each() -> list[Outcome]:
        done = [
            await perform(replace(job, ticket=ticket), transport, breakers, policy)
            for job in jobs(inbox_server, FAILING)
        ]
        transport.close()
        return done

    outcomes = asyncio.run(attempt_each())
    if post_first:
        held = FAILING - sent
        assert [o.result for o in outcomes] == [AttemptResult.RETRY] * sent + [
            AttemptResult.HELD
        ] * held
    else:
        assert [o.result for o in outcomes] == [AttemptResult.RETRY] * FAILING
    assert len(inbox_server.requests()) == sent


def test_a_probe_that_ends_before_its_request_leaves_the_breaker_half_open(
    inbox_server: InboxServer, transport: Transport
) -> None:
    policy = BreakerPolicy(threshold=2, cool_off=0.05)
    breakers = MemoryBreakerStore()
    key = "host:127.0.0.1"
    for _ in range(policy.threshold):
        breakers.record(key, policy, failed=True, admission=None)
    time.sleep(0.1)
    [job] = jobs(inbox_server, 1)

    async def attempt() -> Outcome:
        outcome = await perform(replace(job, ticket=_Ticket(False)), transport, breakers, policy)
        transport.close()
        return outcome

    assert asyncio.run(attempt()).result is AttemptResult.RETRY
    assert inbox_server.requests() == []
    # Nothing said the host is back: the next delivery probes it, the others wait.
    assert breakers.admit(key, policy).kind == "probe"
    assert breakers.admit(key, policy).kind == "held"


class _PayingTicket:
    """A ticket that meets a 402, waits for its payment (``paid``), then sends again."""

    urgent = True

    def __init__(self, paid: asyncio.Event, asked: list[int]) -> None:
        self.paid, self.asked = paid, asked

    async def exchange(self, url: str, size: int, post: Post) -> Exchange:
        self.asked.append((await post(None)).status)
        await self.paid.wait()
        return Exchange(response=await post("L402 token"))


def test_a_delivery_waiting_for_its_payment_is_not_a_request_awaiting_its_answer(
    inbox_server: InboxServer, transport: Transport
) -> None:
    """With a breaker that lets two requests await their answers, a third delivery to
    a host is admitted once the first two met their 402 and wait only for their
    payments (a slow node must not hold deliveries to a host that answers)."""
    inbox_server.behave("/down", Behaviour(statuses=(402, 402, 402, 202)))
    policy = BreakerPolicy(threshold=2, cool_off=60, answer_within=60)
    breakers = MemoryBreakerStore()
    first, second, third = jobs(inbox_server, 3)

    async def attempt_all() -> list[Outcome]:
        paid, asked = asyncio.Event(), []
        ticket = _PayingTicket(paid, asked)
        paying = [
            asyncio.create_task(perform(replace(job, ticket=ticket), transport, breakers, policy))
            for job in (first, second)
        ]
        while len(asked) < 2:
            await asyncio.sleep(0.01)
        later = asyncio.create_task(
            perform(replace(third, ticket=ticket), transport, breakers, policy)
        )
        while len(asked) < 3 and not later.done():
            await asyncio.sleep(0.01)
        paid.set()
        done = await asyncio.gather(*paying, later)
        transport.close()
        return done

    outcomes = asyncio.run(attempt_all())
    assert [outcome.result for outcome in outcomes] == [AttemptResult.DELIVERED] * 3
    assert [r.status for r in outcomes] == [202] * 3

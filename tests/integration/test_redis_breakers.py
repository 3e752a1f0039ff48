"""The Redis breaker store on a real Redis: the contract, expiry, processes, trusted hosts."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest
import redis

from django_outbox.breakers import BreakerPolicy
from django_outbox.breakers.redis_store import RedisBreakerStore
from tests.support.breaker_contract import BreakerStoreContract
from tests.support.breaker_helpers import (
    KEY,
    POLICY,
    closed_port_client,
    concurrently,
    fresh_prefix,
    open_breaker,
    redis_store,
    send_one,
)

pytestmark = pytest.mark.redis_state


class TestRedisStore(BreakerStoreContract):
    """The Redis store follows the seed's state machine, as the memory store does."""

    @pytest.fixture
    def store(self, redis_url: str) -> RedisBreakerStore:
        return redis_store(redis_url)


def test_redis_keys_expire(redis_url: str) -> None:
    store = redis_store(redis_url)
    client = redis.Redis.from_url(redis_url)
    policy = BreakerPolicy(threshold=2, cool_off=400)
    store.record(KEY, policy, failed=True, admission=None)
    ttl = client.pttl(store.prefix + KEY)
    assert 790_000 < ttl <= 800_000, "max(cool_off * 2, 600 s)"
    assert client.hgetall(store.prefix + KEY) == {b"failures": b"1"}
    admission = store.admit(KEY, policy)
    assert admission.token is not None
    assert client.hget(store.prefix + KEY, f"a:{admission.token}") is not None, "awaiting"
    store.record(KEY, policy, failed=False, admission=admission)
    assert not client.exists(store.prefix + KEY), "a success while closed leaves nothing"
    store.record("host:x", POLICY, failed=True, admission=None)
    assert 599_000 < client.pttl(store.prefix + "host:x") <= 600_000, "at least ten minutes"


SHARED = BreakerPolicy(threshold=10, cool_off=0.3)


def _share_one_breaker(url: str, prefix: str, barrier: Any, results: Any) -> None:
    """One of two processes: fail half the threshold, then admit from 8 threads at once."""
    client = redis.Redis.from_url(url)
    store = RedisBreakerStore(lambda: client, prefix=prefix)
    barrier.wait()
    for _ in range(SHARED.threshold // 2):
        store.record(KEY, SHARED, failed=True, admission=None)
    barrier.wait()
    after_failures = store.admit(KEY, SHARED).kind
    time.sleep(SHARED.cool_off + 0.05)
    barrier.wait()
    results.put((after_failures, concurrently(8, lambda: store.admit(KEY, SHARED).kind)))


def test_redis_processes_count_together_and_share_one_probe(redis_url: str) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=60)
    results = context.Queue()
    prefix = fresh_prefix()
    processes = [
        context.Process(target=_share_one_breaker, args=(redis_url, prefix, barrier, results))
        for _ in range(2)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert [after for after, _ in outcomes] == ["held", "held"], "5 + 5 failures opened it"
    kinds = [kind for _, process_kinds in outcomes for kind in process_kinds]
    assert sorted(kinds) == ["held"] * 15 + ["probe"]


class _CountingClient:
    """A Redis client that counts the scripts run through it."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.calls = 0

    def __call__(self) -> redis.Redis:
        self.calls += 1
        return self.client


def test_redis_trusts_a_destination_that_answered_well(redis_url: str) -> None:
    counting = _CountingClient(redis_url)
    store = RedisBreakerStore(counting, prefix=fresh_prefix(), trust_for=0.3)
    send_one(store, failed=False)
    asked = counting.calls
    for _ in range(20):
        send_one(store, failed=False)
    assert counting.calls == asked, "trusted: no round trip to Redis"
    assert not counting.client.exists(store.prefix + KEY), "nothing left awaiting"
    # A failure is counted at once, and ends the trust.
    send_one(store, failed=True)
    assert counting.client.hget(store.prefix + KEY, "failures") == b"1"
    asked = counting.calls
    assert store.admit(KEY, POLICY).token is not None, "asked Redis again"
    assert counting.calls == asked + 1
    # Trust lapses by itself too.
    other = "host:other.example"
    store.record(other, POLICY, failed=False, admission=store.admit(other, POLICY))
    assert store.admit(other, POLICY).token is None
    time.sleep(0.35)
    assert store.admit(other, POLICY).token is not None


def test_redis_does_not_trust_an_answer_from_before_it_opened(redis_url: str) -> None:
    store = redis_store(redis_url)
    early = store.admit(KEY, POLICY)
    open_breaker(store)
    store.record(KEY, POLICY, failed=False, admission=early)
    assert store.admit(KEY, POLICY).kind == "held"


def test_redis_recovers_after_the_pause(redis_url: str) -> None:
    clients = [closed_port_client(), redis.Redis.from_url(redis_url)]
    store = RedisBreakerStore(lambda: clients[0], prefix=fresh_prefix(), error_pause=0)
    assert store.admit(KEY, POLICY).kind == "pass"
    clients.pop(0)
    open_breaker(store)
    assert store.admit(KEY, POLICY).kind == "held"

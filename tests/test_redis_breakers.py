"""The Redis breaker store: shared between processes, trusted hosts, a Redis that is down."""

from __future__ import annotations

import logging
import multiprocessing
import socket
import time
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_outbox.breakers import Admission, BreakerPolicy, BreakerStoreUnavailable
from django_outbox.breakers import redis_store as redis_breakers
from django_outbox.breakers.redis_store import RedisBreakerStore, redis_store_for_cache
from django_outbox.exceptions import OutboxError
from tests.breaker_helpers import (
    KEY,
    POLICY,
    concurrently,
    fresh_prefix,
    open_breaker,
    redis_store,
    send_one,
)


@pytest.fixture(autouse=True)
def _fresh_warning_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the first warning it causes, whatever ran before."""
    monkeypatch.setattr(redis_breakers, "_warnings", redis_breakers._WarningLimiter(60.0))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def _closed_port_client() -> redis.Redis:
    """A client for a port nothing listens on, which fails at once rather than retrying."""
    return redis.Redis(
        host="127.0.0.1", port=_free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )


def _closed_port_store(error_pause: float = 15.0) -> tuple[RedisBreakerStore, list[int]]:
    client = _closed_port_client()
    calls: list[int] = []

    def connect() -> redis.Redis:
        calls.append(1)
        return client

    return RedisBreakerStore(connect, error_pause=error_pause), calls


def test_a_down_redis_lets_deliveries_through_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, _ = _closed_port_store(error_pause=0.0)
    with caplog.at_level(logging.WARNING, logger="django_outbox.breakers"):
        assert store.admit(KEY, POLICY).kind == "pass"
        store.record(KEY, POLICY, failed=True, admission=None)
        store.record(KEY, POLICY, failed=False, admission=Admission("probe", token="token"))
        assert store.admit(KEY, POLICY).kind == "pass"
    logged = [record for record in caplog.records if record.name == "django_outbox.breakers"]
    assert len(logged) == 1, "rate-limited"
    assert logged[0].levelno == logging.WARNING
    assert "unavailable" in logged[0].getMessage()


def test_a_down_redis_is_skipped_for_a_while() -> None:
    store, calls = _closed_port_store(error_pause=0.2)
    assert store.admit(KEY, POLICY).kind == "pass"
    store.record(KEY, POLICY, failed=True, admission=None)
    assert store.admit(KEY, POLICY).kind == "pass"
    assert len(calls) == 1, "not asked again during the pause"
    time.sleep(0.25)
    assert store.admit(KEY, POLICY).kind == "pass"
    assert len(calls) == 2


def test_a_down_redis_is_reported_to_the_admin() -> None:
    store, _ = _closed_port_store()
    with pytest.raises(BreakerStoreUnavailable):
        store.states()
    with pytest.raises(OutboxError):
        store.reset(KEY)


def test_redis_recovers_after_the_pause(redis_url: str) -> None:
    clients = [_closed_port_client(), redis.Redis.from_url(redis_url)]
    store = RedisBreakerStore(lambda: clients[0], prefix=fresh_prefix(), error_pause=0)
    assert store.admit(KEY, POLICY).kind == "pass"
    clients.pop(0)
    open_breaker(store)
    assert store.admit(KEY, POLICY).kind == "held"


def test_redis_store_for_cache_connects_lazily() -> None:
    store = redis_store_for_cache("no-such-cache")
    assert isinstance(store, RedisBreakerStore)
    assert store.prefix == "outbox:breaker:"

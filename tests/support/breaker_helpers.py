"""What the breaker tests share: a policy, a key, and ways to drive a store."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_outbox.breakers import BreakerPolicy, BreakerStore
from django_outbox.breakers.redis_store import RedisBreakerStore
from tests.support.network import free_port

POLICY = BreakerPolicy(threshold=2, cool_off=0.1)
KEY = "inbox:https://remote.example/inbox"
# Past a cool-off, with room for Redis's millisecond clock.
COOLED = POLICY.cool_off + 0.03


def concurrently(count: int, call: Callable[[], str]) -> list[str]:
    """``call`` from ``count`` threads released at once; what each returned."""
    start = threading.Barrier(count)
    answers: list[str] = []

    def run() -> None:
        start.wait()
        answers.append(call())

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def fresh_prefix() -> str:
    """A key prefix per test, under ``outbox:breaker:`` so that conftest cleans up."""
    return f"outbox:breaker:test-{uuid.uuid4().hex}:"


def redis_store(url: str) -> RedisBreakerStore:
    """A store on ``url`` under a prefix of its own."""
    client = redis.Redis.from_url(url)
    return RedisBreakerStore(lambda: client, prefix=fresh_prefix())


def open_breaker(store: BreakerStore, key: str = KEY) -> None:
    """Record enough failures to open the breaker for ``key``."""
    for _ in range(POLICY.threshold):
        store.record(key, POLICY, failed=True, admission=None)


def send_one(store: BreakerStore, *, failed: bool, policy: BreakerPolicy = POLICY) -> None:
    """One delivery to ``KEY`` admitted, sent, and its outcome recorded."""
    admission = store.admit(KEY, policy)
    assert admission.kind != "held"
    store.record(KEY, policy, failed=failed, admission=admission)


def closed_port_client() -> redis.Redis:
    """A client for a port nothing listens on, which fails at once rather than retrying."""
    return redis.Redis(
        host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )

"""Circuit breakers: both stores follow one state machine, and Redis shares it.

Redis tests use ``REDIS_URL`` (as scripts/test sets it) or start a redis-server of their own.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_outbox import breakers
from django_outbox.breakers import (
    BreakerPolicy,
    BreakerStore,
    BreakerStoreUnavailable,
    MemoryBreakerStore,
    RedisBreakerStore,
    breaker_key,
    redis_store_for_cache,
)
from django_outbox.exceptions import OutboxConfigurationError, OutboxError

POLICY = BreakerPolicy(threshold=2, cool_off=0.1)
KEY = "inbox:https://remote.example/inbox"
# Past a cool-off, with room for Redis's millisecond clock.
COOLED = POLICY.cool_off + 0.03


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """``REDIS_URL`` if set, otherwise a throwaway redis-server without persistence."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    server = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(server):
        pytest.skip("redis-server is not installed")
    directory = tempfile.mkdtemp(prefix="outbox-breakers-")
    port = _free_port()
    arguments = ["--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
    process = subprocess.Popen(
        [server, *arguments, "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.fail("redis-server did not start")
        client.close()
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_warning_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the first warning it causes, whatever ran before."""
    monkeypatch.setattr(breakers, "_warnings", breakers._WarningLimiter(60.0))


def _concurrently(count: int, call: Callable[[], str]) -> list[str]:
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


def _prefix() -> str:
    # Per test, so tests stay apart; under outbox:breaker: so conftest cleans up.
    return f"outbox:breaker:test-{uuid.uuid4().hex}:"


def _redis_store(url: str) -> RedisBreakerStore:
    client = redis.Redis.from_url(url)
    return RedisBreakerStore(lambda: client, prefix=_prefix())


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> BreakerStore:
    if request.param == "memory":
        return MemoryBreakerStore()
    return _redis_store(request.getfixturevalue("redis_url"))


def _open(store: BreakerStore, key: str = KEY) -> None:
    for _ in range(POLICY.threshold):
        store.record(key, POLICY, failed=True, probe=None)


# The four scenarios of the seed, for both stores.


def test_a_success_while_closed_starts_the_count_again(store: BreakerStore) -> None:
    store.record(KEY, POLICY, failed=True, probe=None)
    store.record(KEY, POLICY, failed=False, probe=None)
    store.record(KEY, POLICY, failed=True, probe=None)
    assert store.admit(KEY, POLICY).kind == "pass"
    store.record(KEY, POLICY, failed=True, probe=None)
    held = store.admit(KEY, POLICY)
    assert held.kind == "held"
    assert 0 < held.retry_in <= POLICY.cool_off


def test_a_success_sent_before_it_opened_does_not_close_it(store: BreakerStore) -> None:
    _open(store)
    store.record(KEY, POLICY, failed=False, probe=None)
    assert store.admit(KEY, POLICY).kind == "held"
    time.sleep(COOLED)
    # Nor does one that answers while it is half-open.
    probe = store.admit(KEY, POLICY)
    assert probe.kind == "probe"
    store.record(KEY, POLICY, failed=False, probe=None)
    assert store.admit(KEY, POLICY).kind == "held"


def test_after_the_cool_off_one_probe_at_a_time_is_let_through(store: BreakerStore) -> None:
    _open(store)
    time.sleep(COOLED)
    first = store.admit(KEY, POLICY)
    assert first.kind == "probe"
    assert store.admit(KEY, POLICY).kind == "held", "the others wait for the probe"
    # A failed probe opens it for another cool-off.
    store.record(KEY, POLICY, failed=True, probe=first.probe)
    reopened = store.admit(KEY, POLICY)
    assert reopened.kind == "held"
    assert reopened.retry_in > POLICY.cool_off / 2
    time.sleep(COOLED)
    second = store.admit(KEY, POLICY)
    assert second.kind == "probe"
    assert second.probe != first.probe
    # A successful one closes it, and the count starts from nought.
    store.record(KEY, POLICY, failed=False, probe=second.probe)
    assert store.admit(KEY, POLICY).kind == "pass"
    store.record(KEY, POLICY, failed=True, probe=None)
    assert store.admit(KEY, POLICY).kind == "pass"
    store.record(KEY, POLICY, failed=True, probe=None)
    assert store.admit(KEY, POLICY).kind == "held"


def test_a_probe_that_never_reports_back_is_given_up_after_the_cool_off(
    store: BreakerStore,
) -> None:
    _open(store)
    time.sleep(COOLED)
    assert store.admit(KEY, POLICY).kind == "probe"
    assert store.admit(KEY, POLICY).kind == "held"
    time.sleep(COOLED)
    assert store.admit(KEY, POLICY).kind == "probe"


# Both stores, beyond the seed.


def test_half_open_resets_the_count(store: BreakerStore) -> None:
    _open(store)
    time.sleep(COOLED)
    assert store.admit(KEY, POLICY).kind == "probe"
    [state] = store.states()
    assert state.failures == 0
    assert state.probing


def test_concurrent_admits_get_one_probe(store: BreakerStore) -> None:
    # A cool-off long enough that the probe cannot expire while 16 threads on a
    # busy machine are still asking (an expired probe rightly lets another through).
    policy = BreakerPolicy(threshold=2, cool_off=0.5)
    for _ in range(policy.threshold):
        store.record(KEY, policy, failed=True, probe=None)
    time.sleep(policy.cool_off + 0.03)
    kinds = _concurrently(16, lambda: store.admit(KEY, policy).kind)
    assert sorted(kinds) == ["held"] * 15 + ["probe"]


def test_states_list_open_breakers_and_reset_closes_one(store: BreakerStore) -> None:
    before = datetime.now(UTC)
    _open(store, "host:a.example")
    _open(store, "host:b.example")
    store.record("host:c.example", POLICY, failed=True, probe=None)  # closed: not listed
    states = {state.key: state for state in store.states()}
    assert set(states) == {"host:a.example", "host:b.example"}
    a = states["host:a.example"]
    assert a.failures == POLICY.threshold
    assert not a.probing
    slack = timedelta(milliseconds=50)  # Redis's clock against ours
    assert before - slack < a.open_until <= datetime.now(UTC) + timedelta(seconds=POLICY.cool_off)
    assert len(store.states(limit=1)) == 1
    time.sleep(COOLED)
    assert store.admit("host:a.example", POLICY).kind == "probe"
    a = {state.key: state for state in store.states()}["host:a.example"]
    assert a.probing
    assert a.open_until < datetime.now(UTC), "half-open"
    store.reset("host:a.example")
    assert store.admit("host:a.example", POLICY).kind == "pass"
    assert [state.key for state in store.states()] == ["host:b.example"]
    store.reset("host:never.example")


# The memory store.


def test_memory_store_stays_bounded() -> None:
    store = MemoryBreakerStore(max_keys=3)
    once = BreakerPolicy(threshold=1, cool_off=60)
    for number in range(10):
        store.record(f"host:{number}.example", once, failed=True, probe=None)
    assert sorted(state.key for state in store.states()) == [f"host:{n}.example" for n in (7, 8, 9)]


def test_memory_store_forgets_idle_breakers(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(breakers, "time", SimpleNamespace(monotonic=lambda: now[0]))
    store = MemoryBreakerStore()
    once = BreakerPolicy(threshold=1, cool_off=60)
    store.record("host:old.example", once, failed=True, probe=None)
    now[0] += once.idle_after + 1
    store.record("host:new.example", once, failed=True, probe=None)
    assert [state.key for state in store.states()] == ["host:new.example"]


# The Redis store.


def test_redis_keys_expire(redis_url: str) -> None:
    store = _redis_store(redis_url)
    client = redis.Redis.from_url(redis_url)
    policy = BreakerPolicy(threshold=2, cool_off=400)
    store.record(KEY, policy, failed=True, probe=None)
    ttl = client.pttl(store.prefix + KEY)
    assert 790_000 < ttl <= 800_000, "max(cool_off * 2, 600 s)"
    assert client.hgetall(store.prefix + KEY) == {b"failures": b"1"}
    store.record(KEY, policy, failed=False, probe=None)
    assert not client.exists(store.prefix + KEY), "a success while closed leaves nothing"
    store.record("host:x", POLICY, failed=True, probe=None)
    assert 599_000 < client.pttl(store.prefix + "host:x") <= 600_000, "at least ten minutes"


SHARED = BreakerPolicy(threshold=10, cool_off=0.3)


def _share_one_breaker(url: str, prefix: str, barrier: Any, results: Any) -> None:
    """One of two processes: fail half the threshold, then admit from 8 threads at once."""
    client = redis.Redis.from_url(url)
    store = RedisBreakerStore(lambda: client, prefix=prefix)
    barrier.wait()
    for _ in range(SHARED.threshold // 2):
        store.record(KEY, SHARED, failed=True, probe=None)
    barrier.wait()
    after_failures = store.admit(KEY, SHARED).kind
    time.sleep(SHARED.cool_off + 0.05)
    barrier.wait()
    results.put((after_failures, _concurrently(8, lambda: store.admit(KEY, SHARED).kind)))


def test_redis_processes_count_together_and_share_one_probe(redis_url: str) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=60)
    results = context.Queue()
    prefix = _prefix()
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
        store.record(KEY, POLICY, failed=True, probe=None)
        store.record(KEY, POLICY, failed=False, probe="token")
        assert store.admit(KEY, POLICY).kind == "pass"
    logged = [record for record in caplog.records if record.name == "django_outbox.breakers"]
    assert len(logged) == 1, "rate-limited"
    assert logged[0].levelno == logging.WARNING
    assert "unavailable" in logged[0].getMessage()


def test_a_down_redis_is_skipped_for_a_while() -> None:
    store, calls = _closed_port_store(error_pause=0.2)
    assert store.admit(KEY, POLICY).kind == "pass"
    store.record(KEY, POLICY, failed=True, probe=None)
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
    store = RedisBreakerStore(lambda: clients[0], prefix=_prefix(), error_pause=0)
    assert store.admit(KEY, POLICY).kind == "pass"
    clients.pop(0)
    _open(store)
    assert store.admit(KEY, POLICY).kind == "held"


# Keys, policies and the django-redis helper.


def test_breaker_key() -> None:
    inbox = "https://Remote.Example/users/a/inbox"
    assert breaker_key("Remote.Example", inbox, "host") == "host:remote.example"
    assert breaker_key("remote.example", inbox, "inbox") == f"inbox:{inbox}"
    with pytest.raises(OutboxConfigurationError):
        breaker_key("remote.example", inbox, "actor")  # type: ignore[arg-type]


@pytest.mark.parametrize(("threshold", "cool_off"), [(0, 60.0), (10, 0.0), (10, -1.0)])
def test_policy_rejects_nonsense(threshold: int, cool_off: float) -> None:
    with pytest.raises(OutboxConfigurationError):
        BreakerPolicy(threshold=threshold, cool_off=cool_off)
    assert BreakerPolicy() == BreakerPolicy(threshold=10, cool_off=60.0)
    assert BreakerPolicy().idle_after == 600.0
    assert BreakerPolicy(cool_off=3600).idle_after == 7200.0


def test_redis_store_for_cache_connects_lazily() -> None:
    store = redis_store_for_cache("no-such-cache")
    assert isinstance(store, RedisBreakerStore)
    assert store.prefix == "outbox:breaker:"

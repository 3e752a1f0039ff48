"""Host rates in a real Redis: the Lua scripts agree with the arithmetic of
:mod:`django_outbox.breakers.rates`, keys expire, and processes share the turns.

Redis's clock runs while the test does, so waits are compared with a tolerance of a
few milliseconds (the time between two calls), never with our own speed.
"""

from __future__ import annotations

import uuid

import pytest
import redis

from django_outbox.breakers.rate_redis import RedisRateStore
from django_outbox.breakers.rates import RatePolicy, RateRequest

pytestmark = pytest.mark.redis_state

SLACK = 0.05  # seconds that may pass between two calls on a loaded machine


@pytest.fixture
def store(redis_url: str) -> RedisRateStore:
    client = redis.Redis.from_url(redis_url)
    return RedisRateStore(lambda: client, prefix=f"outbox:rate:test-{uuid.uuid4().hex}:")


def test_turns_are_spaced_and_far_ones_not_reserved(store: RedisRateStore) -> None:
    ask = RateRequest("a.example", RatePolicy(4.0), 0.6)
    turns = store.take_many([ask] * 4)
    assert [t.reserved for t in turns] == [True, True, True, False]
    for turn, expected in zip(turns, (0.0, 0.25, 0.5, 0.75), strict=True):
        assert expected - SLACK <= turn.wait <= expected + 0.001


def test_a_throttle_holds_then_resumes_at_half(store: RedisRateStore) -> None:
    policy = RatePolicy(8.0, 1.0, 60.0)
    store.throttled("a.example", policy, 0.3)
    held = store.take_many([RateRequest("a.example", policy, 0.1)])[0]
    assert not held.reserved and 0.3 - SLACK <= held.wait <= 0.301
    first, second = store.take_many([RateRequest("a.example", policy, 5.0)] * 2)
    assert first.reserved and second.reserved
    assert second.wait - first.wait == pytest.approx(0.25, abs=0.01)  # 4/s, half of 8


def test_a_slow_start_begins_at_the_floor(store: RedisRateStore) -> None:
    policy = RatePolicy(100.0, 2.0, 60.0)
    store.started("a.example", policy)
    first, second = store.take_many([RateRequest("a.example", policy, 5.0)] * 2)
    assert second.wait - first.wait == pytest.approx(0.5, abs=0.01)


def test_a_slow_start_begun_ago_is_that_far_along(store: RedisRateStore) -> None:
    policy = RatePolicy(16.0, 1.0, 60.0)
    store.started("a.example", policy, ago=30.0)  # 4/s: the middle of 1/s to 16/s
    first, second = store.take_many([RateRequest("a.example", policy, 5.0)] * 2)
    assert second.wait - first.wait == pytest.approx(0.25, abs=0.01)


def test_every_process_learns_how_far_along_a_ramp_is_from_its_answers(
    store: RedisRateStore,
) -> None:
    """The process that started the ramp knows its share at once; another learns it
    with its first turn there, and reads it later without asking Redis again."""
    policy = RatePolicy(None, 1.0, 60.0)
    store.started("a.example", policy, ago=15.0)
    assert store.ramp_share("a.example") == pytest.approx(0.25, abs=0.01)
    other = RedisRateStore(store._client_factory, prefix=store.prefix)
    assert other.ramp_share("a.example") == 1.0
    other.take_many([RateRequest("a.example", policy, 5.0)])
    assert other.ramp_share("a.example") == pytest.approx(0.25, abs=0.01)
    store.throttled("b.example", policy, 30.0)
    assert store.ramp_share("b.example") == 0.0  # held: as the probe, one at a time


def test_a_free_host_is_not_asked_again_and_leaves_no_key(
    store: RedisRateStore, redis_url: str
) -> None:
    ask = RateRequest("free.example", RatePolicy(None), 5.0)
    assert store.take_now(ask) is None
    assert store.take_many([ask])[0] == (True, 0.0)
    assert store.take_now(ask) == (True, 0.0), "free for a while: no round trip"
    assert not redis.Redis.from_url(redis_url).exists(store.prefix + "free.example")
    store.throttled("free.example", RatePolicy(None), 2.0)
    assert store.take_now(ask) is None, "its own throttle ends the free pass"


def test_keys_expire_after_the_ramp(store: RedisRateStore, redis_url: str) -> None:
    store.throttled("a.example", RatePolicy(5.0, 1.0, 30.0), 10.0)
    ttl = redis.Redis.from_url(redis_url).pttl(store.prefix + "a.example")
    assert 40_000 <= ttl <= 41_000, "hold + slow start + 1 s"


def test_a_down_redis_gives_every_turn_now() -> None:
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    store = RedisRateStore(lambda: client)
    assert (
        store.take_many([RateRequest("a.example", RatePolicy(1.0), 1.0)] * 3) == [(True, 0.0)] * 3
    )

"""Hosts' rates in memory, on a fake clock: turns, holds, slow-down and slow start."""

from __future__ import annotations

from django_outbox.breakers.rate_memory import MemoryRateStore
from django_outbox.breakers.rates import RatePolicy, RateRequest
from tests.support.clocks import FakeClock


def test_turns_are_reserved_within_reach_and_given_back_beyond() -> None:
    clock = FakeClock()
    store = MemoryRateStore(clock=clock)
    ask = RateRequest("a.example", RatePolicy(2.0), 1.0)
    turns = store.take_many([ask, ask, ask, ask])
    assert [(t.reserved, t.wait) for t in turns] == [
        (True, 0.0),
        (True, 0.5),
        (True, 1.0),
        (False, 1.5),
    ]
    clock.now += 1.5
    assert store.take_now(ask) == (True, 0.0)


def test_a_host_without_limit_is_forgotten_and_always_free() -> None:
    store = MemoryRateStore(clock=FakeClock())
    ask = RateRequest("free.example", RatePolicy(None), 5.0)
    assert [t.wait for t in store.take_many([ask] * 50)] == [0.0] * 50
    assert not store._hosts


def test_a_throttle_holds_the_host_then_slows_it_down() -> None:
    clock = FakeClock()
    store = MemoryRateStore(clock=clock)
    policy = RatePolicy(8.0, 1.0, 60.0)
    store.throttled("a.example", policy, 5.0)
    far = store.take_now(RateRequest("a.example", policy, 1.0))
    assert (far.reserved, far.wait) == (False, 5.0)
    clock.now += 5.0
    first = store.take_now(RateRequest("a.example", policy, 10.0))
    second = store.take_now(RateRequest("a.example", policy, 10.0))
    assert (first.wait, second.wait) == (0.0, 0.25)  # 4/s: half of 8


def test_a_closed_breaker_starts_from_the_floor_and_ramps_up() -> None:
    clock = FakeClock()
    store = MemoryRateStore(clock=clock)
    policy = RatePolicy(16.0, 1.0, 60.0)
    store.started("a.example", policy)
    ask = RateRequest("a.example", policy, 100.0)
    assert [t.wait for t in store.take_many([ask, ask])] == [0.0, 1.0]
    clock.now += 60.0
    assert [round(t.wait, 4) for t in store.take_many([ask, ask, ask])] == [0.0, 0.0625, 0.125]


def test_memory_stays_bounded() -> None:
    store = MemoryRateStore(max_hosts=3, clock=FakeClock())
    for n in range(10):
        store.take_now(RateRequest(f"h{n}.example", RatePolicy(1.0), 1.0))
        store.take_now(RateRequest(f"h{n}.example", RatePolicy(1.0), 1.0))
    assert len(store._hosts) == 3


def test_a_slow_start_begun_ago_is_that_far_along() -> None:
    """30 s into a 60 s ramp from 1/s to 16/s, the rate is 4/s (the geometric middle)."""
    clock = FakeClock()
    store = MemoryRateStore(clock=clock)
    policy = RatePolicy(16.0, 1.0, 60.0)
    store.started("a.example", policy, ago=30.0)
    ask = RateRequest("a.example", policy, 100.0)
    assert [t.wait for t in store.take_many([ask, ask])] == [0.0, 0.25]


def test_the_store_tells_how_far_along_a_host_s_ramp_is() -> None:
    clock = FakeClock()
    store = MemoryRateStore(clock=clock)
    policy = RatePolicy(None, 1.0, 60.0)
    assert store.ramp_share("a.example") == 1.0
    store.started("a.example", policy, ago=15.0)
    assert store.ramp_share("a.example") == 0.25
    store.throttled("b.example", policy, 6.0)
    assert store.ramp_share("b.example") == 0.0  # held
    clock.now += 36.0
    assert store.ramp_share("b.example") == 0.5
    assert store.ramp_share("a.example") == 0.85

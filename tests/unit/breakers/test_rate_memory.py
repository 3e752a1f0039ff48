"""Hosts' rates in memory, on a fake clock: turns, holds, slow-down and slow start."""

from __future__ import annotations

from django_outbox.breakers.rate_memory import MemoryRateStore
from django_outbox.breakers.rates import RatePolicy, RateRequest


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_turns_are_reserved_within_reach_and_given_back_beyond() -> None:
    clock = Clock()
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
    store = MemoryRateStore(clock=Clock())
    ask = RateRequest("free.example", RatePolicy(None), 5.0)
    assert [t.wait for t in store.take_many([ask] * 50)] == [0.0] * 50
    assert not store._hosts


def test_a_throttle_holds_the_host_then_slows_it_down() -> None:
    clock = Clock()
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
    clock = Clock()
    store = MemoryRateStore(clock=clock)
    policy = RatePolicy(16.0, 1.0, 60.0)
    store.started("a.example", policy)
    ask = RateRequest("a.example", policy, 100.0)
    assert [t.wait for t in store.take_many([ask, ask])] == [0.0, 1.0]
    clock.now += 60.0
    assert [round(t.wait, 4) for t in store.take_many([ask, ask, ask])] == [0.0, 0.0625, 0.125]


def test_memory_stays_bounded() -> None:
    store = MemoryRateStore(max_hosts=3, clock=Clock())
    for n in range(10):
        store.take_now(RateRequest(f"h{n}.example", RatePolicy(1.0), 1.0))
        store.take_now(RateRequest(f"h{n}.example", RatePolicy(1.0), 1.0))
    assert len(store._hosts) == 3


def test_a_slow_start_begun_ago_is_that_far_along() -> None:
    """30 s into a 60 s ramp from 1/s to 16/s, the rate is 4/s (the geometric middle)."""
    clock = Clock()
    store = MemoryRateStore(clock=clock)
    policy = RatePolicy(16.0, 1.0, 60.0)
    store.started("a.example", policy, ago=30.0)
    ask = RateRequest("a.example", policy, 100.0)
    assert [t.wait for t in store.take_many([ask, ask])] == [0.0, 0.25]

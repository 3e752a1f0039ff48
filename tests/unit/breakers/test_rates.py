"""The arithmetic of host rates: a ramp's growth, a throttle's slow-down, GCRA turns."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_outbox.breakers.rates import (
    Ramp,
    RatePolicy,
    host_policy,
    rate_at,
    slowed,
    started_ramp,
    take,
    throttled_ramp,
)
from django_outbox.exceptions import OutboxConfigurationError

rates = st.floats(min_value=0.1, max_value=1000.0)
floors = st.floats(min_value=0.05, max_value=50.0)
spans = st.floats(min_value=1.0, max_value=600.0)
shares = st.floats(min_value=0.0, max_value=1.0)


@given(rates, floors, spans, shares, shares)
def test_a_ramp_grows_to_the_steady_rate_and_never_past_it(
    rate: float, floor: float, span: float, a: float, b: float
) -> None:
    policy = RatePolicy(rate, floor, span)
    ramp = Ramp(100.0, min(floor, rate))
    early, late = sorted((a, b))
    at_early = rate_at(policy, ramp, 100.0 + early * span)
    at_late = rate_at(policy, ramp, 100.0 + late * span)
    assert at_early is not None and at_late is not None
    assert min(floor, rate) * (1 - 1e-9) <= at_early <= at_late * (1 + 1e-9)
    assert at_late <= rate * (1 + 1e-9)
    assert rate_at(policy, ramp, 100.0 + span) == pytest.approx(rate)


@given(rates, spans)
def test_a_slow_start_sends_at_most_a_quarter_in_its_first_sixth(rate: float, span: float) -> None:
    """From the floor (1/s) to ``rate``: the first sixth of the span allows at most a
    quarter of the steady rate, whenever the steady rate is at least 4/s."""
    policy = RatePolicy(max(rate, 4.0), 1.0, span)
    sixth = rate_at(policy, Ramp(0.0, 1.0), span / 6)
    assert sixth is not None and sixth <= max(rate, 4.0) / 4 * (1 + 1e-9) + 1.0


def test_a_host_without_a_steady_rate_doubles_then_is_free() -> None:
    policy = RatePolicy(None, 1.0, 60.0)
    assert rate_at(policy, Ramp(0.0, 1.0), 0.0) == 1.0
    assert rate_at(policy, Ramp(0.0, 1.0), 30.0) == pytest.approx(16.0)
    assert rate_at(policy, Ramp(0.0, 1.0), 60.0) is None
    assert rate_at(policy, None, 0.0) is None


def test_a_ramp_not_begun_holds() -> None:
    assert rate_at(RatePolicy(5.0), Ramp(10.0, 1.0), 9.0) == 0.0


@given(st.one_of(st.none(), rates), floors)
def test_a_throttle_halves_the_rate_down_to_the_floor(current: float | None, floor: float) -> None:
    policy = RatePolicy(None, floor, 60.0)
    after = slowed(policy, current)
    assert after >= floor
    if current is not None and current / 2 > floor:
        assert after == pytest.approx(current / 2)


def test_a_throttle_holds_then_resumes_at_half_the_rate_it_had() -> None:
    policy = RatePolicy(8.0, 1.0, 60.0)
    ramp = throttled_ramp(policy, None, 100.0, 5.0)
    assert ramp == Ramp(105.0, 4.0)
    # A second throttle while held halves what it would resume at, from its own end.
    assert throttled_ramp(policy, ramp, 101.0, 5.0) == Ramp(106.0, 2.0)
    # A breaker that closes while held starts from the floor when the hold ends.
    assert started_ramp(policy, ramp, 101.0) == Ramp(105.0, 1.0)


def test_a_slow_start_learnt_of_late_begins_when_it_began() -> None:
    """A pause that ended 10 s ago ramps from then, and every process that learns of it
    later gives the same ramp; a hold running then still comes first."""
    policy = RatePolicy(8.0, 1.0, 60.0)
    first = started_ramp(policy, None, 110.0, ago=10.0)
    assert first == Ramp(100.0, 1.0)
    assert started_ramp(policy, first, 112.0, ago=12.0) == first
    assert started_ramp(policy, Ramp(105.0, 4.0), 110.0, ago=10.0) == Ramp(105.0, 1.0)


@given(rates, st.integers(min_value=1, max_value=200))
def test_turns_are_spaced_by_the_rate(rate: float, count: int) -> None:
    """GCRA: ``count`` turns reserved at once start one interval apart."""
    policy = RatePolicy(rate, 1.0, 60.0)
    tat, waits = 0.0, []
    for _ in range(count):
        turn, tat = take(policy, None, tat, 0.0, math.inf)
        assert turn.reserved
        waits.append(turn.wait)
    assert waits[0] == 0.0
    assert waits[-1] == pytest.approx((count - 1) / rate)


def test_a_far_turn_is_not_reserved() -> None:
    policy = RatePolicy(1.0, 1.0, 60.0)
    turn, tat = take(policy, None, 10.0, 0.0, 5.0)
    assert (turn.reserved, turn.wait, tat) == (False, 10.0, 10.0)
    turn, _ = take(RatePolicy(None), Ramp(3.0, 1.0), 0.0, 0.0, 5.0)
    assert (turn.reserved, turn.wait) == (True, 3.0)


def test_a_host_s_own_rate_replaces_the_default() -> None:
    rates_by_host = {"slow.example": 2.0, "free.example": None}
    assert host_policy("Slow.Example", 5.0, rates_by_host, 1.0, 60.0).rate == 2.0
    assert host_policy("free.example", 5.0, rates_by_host, 1.0, 60.0).rate is None
    assert host_policy("other.example", 5.0, rates_by_host, 1.0, 60.0).rate == 5.0


@pytest.mark.parametrize(
    "options", [{"rate": 0.0}, {"rate": -1.0}, {"floor": 0.0}, {"slow_start": -1.0}]
)
def test_bad_policies_are_refused(options: dict[str, float]) -> None:
    with pytest.raises(OutboxConfigurationError):
        RatePolicy(**options)

"""How long a delivery is held while another one pays its host."""

from __future__ import annotations

from django_outbox.payments.claims import HOLD_LIMIT, hold_for


def test_the_hold_grows_in_powers_of_two_with_the_queue_up_to_the_limit() -> None:
    holds = [hold_for(1.0, queued, spread=1.0) for queued in (0, 2, 3, 5, 16, 30, 1000)]
    assert holds == [1.0, 1.0, 2.0, 4.0, 8.0, 16.0, HOLD_LIMIT]


def test_one_spread_gives_one_hold_per_queue_length() -> None:
    assert hold_for(2.0, 30, spread=0.8) == hold_for(2.0, 31, spread=0.8) == 2.0 * 16 * 0.8


def test_without_a_spread_the_hold_is_spread_at_random_around_it() -> None:
    for _ in range(50):
        assert 0.75 * 16 <= hold_for(1.0, 30) <= 1.25 * 16

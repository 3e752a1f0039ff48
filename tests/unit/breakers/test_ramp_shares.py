"""Ramp shares a process learnt from its rate store, read later as grown since."""

from __future__ import annotations

import pytest

from django_outbox.breakers.ramp_shares import RampShares
from tests.support.clocks import FakeClock


def test_a_share_grows_by_one_per_span_and_is_forgotten_once_whole() -> None:
    clock = FakeClock()
    shares = RampShares(clock=clock)
    shares.learnt("a.example", 0.0, 60.0)
    assert shares.share("a.example") == 0.0
    clock.now += 30.0
    assert shares.share("a.example") == pytest.approx(0.5)
    clock.now += 30.0
    assert shares.share("a.example") == 1.0
    assert not shares._hosts


def test_a_held_host_reads_0_until_its_ramp_begins() -> None:
    clock = FakeClock()
    shares = RampShares(clock=clock)
    shares.learnt("a.example", -0.25, 20.0)  # held 5 s more
    clock.now += 4.0
    assert shares.share("a.example") == 0.0
    clock.now += 11.0
    assert shares.share("a.example") == pytest.approx(0.5)


def test_hosts_without_a_ramp_read_whole_and_are_not_kept() -> None:
    shares = RampShares(clock=FakeClock())
    shares.learnt("a.example", 0.5, 60.0)
    shares.learnt("a.example", 1.0, 60.0)
    shares.learnt("b.example", 0.0, 0.0)  # no slow start: nothing ramps
    assert shares.share("a.example") == shares.share("b.example") == 1.0
    assert shares.share("never.example") == 1.0
    assert not shares._hosts


def test_at_most_max_hosts_are_kept_ended_ramps_first() -> None:
    clock = FakeClock()
    shares = RampShares(max_hosts=3, clock=clock)
    shares.learnt("ended.example", 0.9, 10.0)
    shares.learnt("b.example", 0.0, 60.0)
    shares.learnt("c.example", 0.0, 60.0)
    clock.now += 2.0  # ended.example's ramp is over, unread
    shares.learnt("d.example", 0.0, 60.0)
    assert set(shares._hosts) == {"b.example", "c.example", "d.example"}
    shares.learnt("e.example", 0.0, 60.0)  # none ended: the oldest learnt goes
    assert set(shares._hosts) == {"c.example", "d.example", "e.example"}

"""Attempts at a host's rate: turns waited for on the loop, far ones given back unsent,
and what a 429, a 503 with ``Retry-After`` and a probe's success tell the rate store."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_outbox.breakers import MemoryBreakerStore
from django_outbox.breakers.configured import configured_rate_store, rate_policy
from django_outbox.breakers.rate_memory import MemoryRateStore
from django_outbox.breakers.rates import RatePolicy, RateRequest
from django_outbox.transport import Transport
from django_outbox.values.outcomes import AttemptResult, Outcome
from django_outbox.worker import pacing
from django_outbox.worker.attempt import perform
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.clocks import FakeClock
from tests.unit.worker.test_attempt import jobs


@pytest.fixture
def transport() -> Transport:
    return Transport(user_agent="outbox-test/1", allowed_networks=["127.0.0.0/8"])


def attempt_all(
    transport: Transport, inbox_server: InboxServer, rates: MemoryRateStore, count: int
) -> list[Outcome]:
    """``count`` attempts to the inbox server's host, all started together."""

    async def attempt() -> list[Outcome]:
        breakers = MemoryBreakerStore()
        done = await asyncio.gather(
            *(perform(job, transport, breakers, None, rates) for job in jobs(inbox_server, count))
        )
        transport.close()
        return list(done)

    return asyncio.run(attempt())


@override_settings(OUTBOX_HOST_RATES={"127.0.0.1": 4.0})
def test_near_turns_are_waited_for_and_far_ones_given_back_without_a_request(
    inbox_server: InboxServer, transport: Transport
) -> None:
    began = time.monotonic()
    outcomes = attempt_all(transport, inbox_server, MemoryRateStore(), 30)
    sent = [o for o in outcomes if o.result is AttemptResult.DELIVERED]
    held = [o for o in outcomes if o.result is AttemptResult.HELD]
    # 4/s: turns up to 5 s away are reserved (21 of them: at 0, 0.25 ... 5.0 s).
    assert (len(sent), len(held)) == (21, 9)
    assert len(inbox_server.requests()) == 21
    assert all(o.error == pacing.PACED_ERROR and o.held_for and o.held_for > 5 for o in held)
    times = sorted(r.received_at for r in inbox_server.requests())
    assert times[-1] - times[0] >= 4.5  # spaced, not sent together
    assert time.monotonic() - began < 30


def test_a_429_holds_the_host_in_the_rate_store_too(
    inbox_server: InboxServer, transport: Transport
) -> None:
    inbox_server.behave("/down", Behaviour(statuses=(429,), headers={"Retry-After": "30"}))
    rates = MemoryRateStore()
    (first,) = attempt_all(transport, inbox_server, rates, 1)
    assert first.status == 429
    turn = rates.take_now(RateRequest("127.0.0.1", rate_policy("127.0.0.1"), 5.0))
    assert not turn.reserved and turn.wait == pytest.approx(30, abs=1)


@pytest.mark.parametrize(
    ("status", "retry_after", "throttle", "hold"),
    [(429, 7.0, 7.0, 7.0), (503, 9.0, 0.0, 9.0), (503, None, 0.0, 0.0), (500, 9.0, 0.0, 0.0)],
)
def test_what_slows_a_host_down(
    status: int, retry_after: float | None, throttle: float, hold: float
) -> None:
    assert pacing.slow_down_for(status, retry_after, throttle) == hold


def test_a_503_s_slow_down_is_capped_and_ignored_when_not_waiting_as_asked() -> None:
    with override_settings(OUTBOX_THROTTLE_CAP=60.0):
        assert pacing.slow_down_for(503, 3600.0, 0.0) == 60.0
    with override_settings(OUTBOX_WAIT_AS_ASKED=False):
        assert pacing.slow_down_for(503, 30.0, 0.0) == 0.0


def test_a_probe_that_succeeded_starts_the_host_from_the_floor() -> None:
    rates = MemoryRateStore()
    policy = RatePolicy(10.0, 1.0, 60.0)
    with override_settings(OUTBOX_HOST_RATES={"h.example": 10.0}):
        asyncio.run(pacing.note(rates, "H.example", hold=0.0, probe_closed=True))
    ask = RateRequest("h.example", policy, 10.0)
    assert [round(t.wait, 2) for t in rates.take_many([ask, ask])] == [0.0, 1.0]


@pytest.mark.parametrize(
    ("settings", "on"),
    [
        ({"OUTBOX_SLOW_START_SECONDS": 0}, False),
        ({"OUTBOX_SLOW_START_SECONDS": 0, "OUTBOX_HOST_RATE": 3}, True),
        ({"OUTBOX_SLOW_START_SECONDS": 0, "OUTBOX_HOST_RATES": {"a": 3}}, True),
        ({}, True),
    ],
)
def test_rates_are_off_only_without_rates_nor_slow_start(
    settings: dict[str, object], on: bool
) -> None:
    with override_settings(**settings):
        assert (configured_rate_store() is not None) is on


@override_settings(OUTBOX_HOST_RATES={"h.example": 16.0}, OUTBOX_SLOW_START_SECONDS=60)
def test_a_pause_that_ended_starts_its_host_from_the_floor_as_of_its_end() -> None:
    """Ended 30 s ago: 4/s, the middle of 1/s to 16/s; ended 2 minutes ago: over, no ramp."""
    rates = MemoryRateStore()
    now = timezone.now()
    pacing.start_after_pauses(
        rates, {"H.example": now - timedelta(seconds=30), "o.example": now - timedelta(minutes=2)}
    )
    ask = RateRequest("h.example", rate_policy("h.example"), 10.0)
    first, second = rates.take_many([ask, ask])
    assert second.wait - first.wait == pytest.approx(0.25, abs=0.01)
    assert set(rates._hosts) == {"h.example"}
    pacing.start_after_pauses(None, {"h.example": now})  # rates off: nothing to start


def test_a_host_s_concurrency_ramps_from_one_to_per_host_by_a_constant_factor() -> None:
    shares = (-0.5, 0.0, 0.33, 0.34, 0.5, 0.9, 1.0)
    assert [pacing.host_cap(8, share) for share in shares] == [1, 1, 1, 2, 2, 6, 8]
    assert pacing.host_cap(1, 0.0) == pacing.host_cap(1, 1.0) == 1
    assert pacing.host_cap(8, 2 / 3) == 4


def test_the_engine_s_host_caps_follow_the_ramps_the_rate_store_told_of() -> None:
    clock = FakeClock()
    rates = MemoryRateStore(clock=clock)
    caps = pacing.ramped_caps(rates, 8)
    assert caps is not None and pacing.ramped_caps(None, 8) is None
    rates.started("h.example", RatePolicy(None, 1.0, 60.0))
    assert (caps("H.example"), caps("other.example")) == (1, 8)
    clock.now += 30.0
    assert caps("h.example") == 2
    clock.now += 30.0
    assert caps("h.example") == 8

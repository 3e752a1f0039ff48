"""The retry schedule, Retry-After and batch deadlines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.test import override_settings

from django_outbox.destinations.backoff import (
    HOLD_JITTER,
    THROTTLE_WAIT,
    held_until,
    next_attempt,
    schedule_delay,
    throttle_for,
)
from django_outbox.values.outcomes import permanent_status, server_failed

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_default_schedule_doubles_to_a_cap_and_spans_about_two_days() -> None:
    delays = [schedule_delay(n) for n in range(1, 16)]
    assert delays[:3] == [30.0, 60.0, 120.0]
    assert max(delays) == 8 * 3600
    assert 48 * 3600 < sum(delays) < 49 * 3600


def test_jitter_shortens_by_at_most_a_quarter() -> None:
    for _ in range(200):
        decision = next_attempt(now=NOW, attempts=3, max_attempts=16, deadline=None)
        assert decision.retry_at is not None
        wait = (decision.retry_at - NOW).total_seconds()
        assert 90.0 <= wait <= 120.0


def test_retry_after_is_honoured_and_capped() -> None:
    decision = next_attempt(now=NOW, attempts=1, max_attempts=16, deadline=None, asked=120)
    assert decision.retry_at == NOW + timedelta(seconds=120)
    huge = next_attempt(now=NOW, attempts=1, max_attempts=16, deadline=None, asked=10**9)
    assert huge.retry_at == NOW + timedelta(hours=24)
    with override_settings(OUTBOX_WAIT_AS_ASKED=False):
        plain = next_attempt(now=NOW, attempts=1, max_attempts=16, deadline=None, asked=120)
    assert plain.retry_at is not None and plain.retry_at <= NOW + timedelta(seconds=30)


def test_a_retry_after_the_deadline_is_given_up_as_a_deadline_failure() -> None:
    decision = next_attempt(
        now=NOW, attempts=1, max_attempts=16, deadline=NOW + timedelta(seconds=10), asked=120
    )
    assert decision.retry_at is None and decision.deadline
    assert "deadline" in decision.give_up


def test_attempts_run_out() -> None:
    decision = next_attempt(now=NOW, attempts=5, max_attempts=5, deadline=None)
    assert decision.retry_at is None and not decision.deadline


def test_breaker_hold_waits_for_the_cool_off_or_the_deadline() -> None:
    # Lengthened at random by a quarter of the hold at most, and never by more than
    # HOLD_JITTER: the deliveries held together do not all come back at once.
    ends = [held_until(NOW, 60, None).retry_at for _ in range(200)]
    assert all(e is not None and 0 <= (e - NOW).total_seconds() - 60 <= HOLD_JITTER for e in ends)
    assert len(set(ends)) > 100
    short = [held_until(NOW, 1.0, None).retry_at for _ in range(200)]
    assert all(s is not None and 1.0 <= (s - NOW).total_seconds() <= 1.25 for s in short)
    assert held_until(NOW, 60, NOW + timedelta(seconds=5)).deadline


def test_a_429_holds_its_host_for_the_time_asked_within_bounds() -> None:
    assert throttle_for(429, 3.0) == 3.0
    assert throttle_for(429, None) == THROTTLE_WAIT
    assert throttle_for(429, 10**9) == 300.0, "OUTBOX_THROTTLE_CAP bounds a hostile peer"
    assert throttle_for(429, -5.0) == 0.0
    assert throttle_for(503, 3.0) == 0.0, "only a 429 throttles"
    with override_settings(OUTBOX_THROTTLE_CAP=2.0):
        assert throttle_for(429, 3.0) == 2.0
    with override_settings(OUTBOX_WAIT_AS_ASKED=False):
        assert throttle_for(429, 3.0) == THROTTLE_WAIT


def test_a_429_is_retried_after_the_time_asked_then_the_schedule_one_step_behind() -> None:
    first = next_attempt(now=NOW, attempts=1, max_attempts=16, deadline=None, throttle=3.0)
    assert first.retry_at == NOW + timedelta(seconds=3)
    third = next_attempt(now=NOW, attempts=3, max_attempts=16, deadline=None, throttle=3.0)
    assert third.retry_at is not None
    assert 45 <= (third.retry_at - NOW).total_seconds() <= 60, "the wait after attempt 2"


def test_429_counts_against_neither_breaker_nor_failure_days() -> None:
    assert not server_failed(429)
    assert server_failed(408) and server_failed(None) and server_failed(503)


def test_permanent_statuses() -> None:
    assert [s for s in (400, 401, 403, 404, 408, 410, 422, 429) if permanent_status(s)] == [
        400,
        403,
        404,
        410,
        422,
    ]
    assert permanent_status(501)
    assert not any(permanent_status(s) for s in (200, 202, 500, 502, 503))


def test_an_internal_error_comes_back_soon_and_still_spends_its_attempts() -> None:
    from django_outbox.destinations.backoff import INTERNAL_RETRY_BASE, decide
    from django_outbox.values.claimed import ClaimedRow, MessageData
    from django_outbox.values.outcomes import AttemptResult, Outcome, internal_error

    def failed(attempts: int, max_attempts: int = 16) -> Outcome:
        row = ClaimedRow(
            1, 1, "https://a.example/inbox", "a.example", [], "outbox", "", attempts, "t"
        )
        message = MessageData(1, "actor", b"{}", b"", "", None, "", False, max_attempts)
        return internal_error(row, message, "preparing the delivery", LookupError("gone"))

    first = decide(failed(1), NOW)
    assert first.retry_at is not None
    assert INTERNAL_RETRY_BASE * 0.75 <= (first.retry_at - NOW).total_seconds() <= 5
    third = decide(failed(3), NOW).retry_at
    assert third is not None and (third - NOW).total_seconds() <= 4 * INTERNAL_RETRY_BASE
    assert decide(failed(16), NOW).give_up == "gave up after 16 attempts"
    outcome = failed(1)
    assert outcome.result is AttemptResult.RETRY and not outcome.host_failed
    assert outcome.error == "internal: preparing the delivery: LookupError: gone"
    assert Outcome(outcome.row, outcome.message, AttemptResult.RETRY, status=503).host_failed

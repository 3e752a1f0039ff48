"""Hosts failing on distinct days become unavailable; any success makes them available."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from typing import Any, cast
from unittest import mock

import pytest
from django.test import override_settings
from django.utils import timezone

from django_outbox import outbox
from django_outbox.destinations.availability import (
    forget_cached,
    forget_hosts,
    record_failures,
    record_successes,
    unavailable_hosts,
)
from django_outbox.models import Host
from django_outbox.signals import host_available, host_unavailable
from django_outbox.values.claimed import ClaimedRow
from django_outbox.values.outcomes import AttemptResult, Outcome


def fail_on(day: date, hosts: list[str]) -> None:
    moment = timezone.now().replace(year=day.year, month=day.month, day=day.day)
    with mock.patch("django_outbox.destinations.failure_days.timezone.now", return_value=moment):
        record_failures(dict.fromkeys(hosts, (503, "HTTP 503")))


@pytest.mark.django_db
def test_a_host_failing_on_seven_distinct_days_becomes_unavailable() -> None:
    start = date(2026, 3, 1)
    for offset in range(6):
        fail_on(start + timedelta(days=offset), ["a.example"])
        fail_on(start + timedelta(days=offset), ["a.example"])  # same day counts once
    host = Host.objects.get(name="a.example")
    assert (host.failure_days, host.unavailable_since) == (6, None)
    fail_on(start + timedelta(days=6), ["a.example", "b.example"])
    host.refresh_from_db()
    assert host.failure_days == 7
    assert host.unavailable_since is not None
    assert Host.objects.get(name="b.example").failure_days == 1


@pytest.mark.django_db
def test_any_success_makes_a_host_available_again() -> None:
    with override_settings(OUTBOX_UNAVAILABLE_AFTER_DAYS=1):
        record_failures({"a.example": (None, "timeout: no answer within 30 s")})
    assert Host.objects.get().unavailable_since is not None
    record_successes(["a.example"])
    assert not Host.objects.exists()


@pytest.fixture
def heard() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The host signals sent, by name, with their arguments."""
    got: list[tuple[str, dict[str, Any]]] = []

    def unavailable(sender: object, **kwargs: Any) -> None:
        got.append(("unavailable", kwargs))

    def available(sender: object, **kwargs: Any) -> None:
        got.append(("available", kwargs))

    host_unavailable.connect(unavailable, dispatch_uid="test-unavailable")
    host_available.connect(available, dispatch_uid="test-available")
    yield got
    host_unavailable.disconnect(dispatch_uid="test-unavailable")
    host_available.disconnect(dispatch_uid="test-available")


@pytest.mark.django_db
def test_the_latest_failure_is_the_hosts_reason_and_comes_with_its_signal(
    heard: list[tuple[str, dict[str, Any]]], django_capture_on_commit_callbacks: Any
) -> None:
    with override_settings(OUTBOX_UNAVAILABLE_AFTER_DAYS=1):
        with django_capture_on_commit_callbacks(execute=True):
            record_failures(
                {"a.example": (502, "HTTP 502"), "b.example": (None, "connect: refused")}
            )
            assert heard == [], "sent only once committed"
        with django_capture_on_commit_callbacks(execute=True):
            record_failures({"a.example": (503, "bad gateway\nagain")})
    rows = {host.name: (host.last_status, host.last_error) for host in Host.objects.all()}
    assert rows == {
        "a.example": (503, "HTTP 503: bad gateway\\nagain"),
        "b.example": (None, "connect: refused"),
    }
    assert [(name, kwargs["host"], kwargs["reason"]) for name, kwargs in heard] == [
        ("unavailable", "a.example", "HTTP 502"),
        ("unavailable", "b.example", "connect: refused"),
    ], "once each: already unavailable the second time"
    assert all(kwargs["since"] is not None for _, kwargs in heard)


@pytest.mark.django_db
def test_a_success_or_a_reset_announces_the_host_available(
    heard: list[tuple[str, dict[str, Any]]], django_capture_on_commit_callbacks: Any
) -> None:
    with override_settings(OUTBOX_UNAVAILABLE_AFTER_DAYS=1):
        record_failures({"a.example": (500, "HTTP 500"), "b.example": (500, "HTTP 500")})
    with override_settings(OUTBOX_UNAVAILABLE_AFTER_DAYS=2):
        record_failures({"c.example": (500, "HTTP 500")})  # failing, not unavailable
    with django_capture_on_commit_callbacks(execute=True):
        record_successes(["a.example", "c.example"])
        assert forget_hosts(["b.example"]) == 1
    assert sorted(kwargs["host"] for name, kwargs in heard if name == "available") == [
        "a.example",
        "b.example",
    ]
    assert not Host.objects.exists()


@pytest.mark.django_db
def test_a_host_seen_is_available_again_and_keeps_its_failure_days(
    heard: list[tuple[str, dict[str, Any]]], django_capture_on_commit_callbacks: Any
) -> None:
    start = date(2026, 3, 1)
    with override_settings(OUTBOX_UNAVAILABLE_AFTER_DAYS=2):
        fail_on(start, ["a.example"])
        fail_on(start + timedelta(days=1), ["a.example"])
        assert unavailable_hosts_now() == {"a.example"}
        with django_capture_on_commit_callbacks(execute=True):
            assert outbox.host_seen("https://A.example/users/alice") is True
        assert outbox.host_seen("a.example") is False  # nothing to clear twice
        assert outbox.host_seen("b.example") is False
        host = Host.objects.get()
        assert (host.failure_days, host.unavailable_since) == (2, None)
        assert unavailable_hosts_now() == set()
        fail_on(start + timedelta(days=1), ["a.example"])  # one more failure: unavailable again
        assert Host.objects.get().unavailable_since is not None
    assert [(name, kwargs["host"]) for name, kwargs in heard] == [("available", "a.example")]


def unavailable_hosts_now() -> set[str]:
    forget_cached()
    return set(unavailable_hosts())


@pytest.mark.parametrize(
    ("status", "failure", "counts"),
    [
        (503, "", True),
        (None, "timeout", True),
        (408, "", True),
        (429, "", False),
        (None, "internal", False),
        (404, "", False),
    ],
)
def test_only_the_hosts_own_failures_count(status: int | None, failure: str, counts: bool) -> None:
    row = ClaimedRow(1, 1, "https://a.example/inbox", "a.example", [], "outbox", "", 1, "t")
    outcome = Outcome(row, cast(Any, None), AttemptResult.RETRY, status, failure=failure)
    assert outcome.host_failed is counts

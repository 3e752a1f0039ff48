"""Hosts failing on distinct days become unavailable; any success makes them available."""

from __future__ import annotations

from datetime import date, timedelta
from unittest import mock

import pytest
from django.test import override_settings
from django.utils import timezone

from django_outbox.hosts import record_failures, record_successes
from django_outbox.models import Host


def fail_on(day: date, hosts: list[str]) -> None:
    moment = timezone.now().replace(year=day.year, month=day.month, day=day.day)
    with mock.patch("django_outbox.failure_days.timezone.now", return_value=moment):
        record_failures(hosts)


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
        record_failures(["a.example"])
    assert Host.objects.get().unavailable_since is not None
    record_successes(["a.example"])
    assert not Host.objects.exists()

"""Failed attempts are counted as failures only: late successes, 402s and holds are not."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_outbox.models import Attempt, DeliveryState
from django_outbox.status.snapshot import failing_hosts, take_snapshot
from django_outbox.status.timeline import timeline
from tests.support.observability import deliveries

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_redis")]


def retried_then_delivered(count: int, host: str = "flaky.example") -> None:
    """``count`` deliveries that failed once, were held once, paid once and then succeeded."""
    now = timezone.now()
    for row in deliveries(count, host=host, state=DeliveryState.DELIVERED, finished_at=now):
        for number, held, result in (
            (1, False, "retry"),
            (2, True, "held"),
            (2, False, "paying"),
            (3, False, "delivered"),
        ):
            Attempt.objects.create(
                delivery=row, number=number, held=held, host=host, result=result,
                at=now - timedelta(minutes=5 - number), status=503 if number == 1 else 202,
            )  # fmt: skip


def test_a_host_with_retries_and_successes_counts_only_the_retries() -> None:
    retried_then_delivered(8)
    (refused,) = deliveries(1, host="flaky.example", state=DeliveryState.REFUSED)
    Attempt.objects.create(
        delivery=refused, number=1, host="flaky.example", result="refused", status=410,
        at=timezone.now(),
    )  # fmt: skip
    _, _, found = failing_hosts(timezone.now())
    assert [(host.host, host.failures) for host in found] == [("flaky.example", 9)]
    hour = timeline(timedelta(hours=1), "minute")
    assert sum(bucket.failed_attempts for bucket in hour) == 9
    day = timeline(timedelta(days=1), "hour")
    assert sum(bucket.failed_attempts for bucket in day) == 9


def test_the_failed_attempts_gauge_counts_only_failures() -> None:
    pytest.importorskip("prometheus_client")
    from django_outbox.metrics.collectors import gauge_families

    retried_then_delivered(3)
    (family,) = [
        family
        for family in gauge_families(take_snapshot())
        if family.name == "outbox_host_failed_attempts"
    ]
    assert [(sample.labels, sample.value) for sample in family.samples] == [
        ({"host": "flaky.example"}, 3)
    ]

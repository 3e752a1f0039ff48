"""The destination metrics: fan-out sizes, the hosts' backlog ages, breakers per host and
what paid push paid, each with a bounded label set."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_outbox import outbox
from django_outbox.breakers import BreakerState
from django_outbox.counters import recording
from django_outbox.metrics import destinations
from django_outbox.metrics.collectors import breaker_families
from django_outbox.models import DeliveryState
from django_outbox.payments.models import PaymentAttempt
from testproject.demo.keys import ACTOR
from tests.support.observability import deliveries, exposition
from tests.support.receivers import ACTIVITY
from tests.support.sends import inboxes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_redis")]


def test_each_committed_send_counts_its_fan_out_and_a_rolled_back_one_nothing(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        outbox.send(ACTOR, ACTIVITY, inboxes(3, "fan"))
        outbox.send(ACTOR, ACTIVITY, inboxes(60, "wide"))
    with (
        django_capture_on_commit_callbacks(execute=True),
        suppress(RuntimeError),
        transaction.atomic(),
    ):
        outbox.send(ACTOR, ACTIVITY, inboxes(7, "undone"))
        raise RuntimeError("rolled back")
    recording.flush()
    text = exposition()
    assert 'outbox_fanout_inboxes_bucket{le="2.0"} 0.0' in text
    assert 'outbox_fanout_inboxes_bucket{le="5.0"} 1.0' in text
    assert 'outbox_fanout_inboxes_bucket{le="50.0"} 1.0' in text
    assert 'outbox_fanout_inboxes_bucket{le="100.0"} 2.0' in text
    assert "outbox_fanout_inboxes_count 2.0" in text
    assert "outbox_fanout_inboxes_sum 63.0" in text


def test_the_longest_waiting_hosts_are_exposed_by_their_oldest_due_delivery() -> None:
    now = timezone.now()
    for n in range(destinations.TOP + 3):
        deliveries(
            2,
            host=f"h{n}.example",
            state=DeliveryState.QUEUED,
            next_attempt_at=now - timedelta(minutes=n),
        )
    deliveries(
        1,
        host="later.example",
        state=DeliveryState.QUEUED,
        next_attempt_at=now + timedelta(hours=1),
    )
    deliveries(
        1,
        host="done.example",
        state=DeliveryState.DELIVERED,
        next_attempt_at=now - timedelta(days=1),
    )
    ages = destinations.read_destination_gauges().backlog_ages
    assert [host for host, _ in ages] == [f"h{n}.example" for n in range(12, 2, -1)]
    assert 12 * 60 <= ages[0][1] < 12 * 60 + 30
    assert 'outbox_host_backlog_age_seconds{host="h12.example"}' in exposition()


def test_open_breakers_are_exposed_for_the_hosts_with_most_failures() -> None:
    soon = timezone.now() + timedelta(minutes=1)
    states = [BreakerState(f"host:b{n}.example", n, soon, n == 20) for n in range(25)]
    states.append(BreakerState("inbox:https://c.example/inbox", 99, soon, False))
    (family,) = breaker_families(states)
    labels = [(sample.labels["host"], sample.labels["probing"]) for sample in family.samples]
    assert len(labels) == 10
    assert labels[:3] == [
        ("c.example", "false"),
        ("b24.example", "false"),
        ("b23.example", "false"),
    ]
    assert ("b20.example", "true") in labels


def test_payments_are_exposed_by_state_only_with_paid_push_on() -> None:
    common = {
        "sender": ACTOR,
        "host": "paid.example",
        "destination": "https://paid.example/inbox",
        "invoice": "lnbcrt1",
        "macaroon": "m",
        "invoice_expires_at": timezone.now(),
        "expires_at": timezone.now(),
    }
    PaymentAttempt.objects.create(
        payment_hash="a" * 64, amount_msat=2_000, fee_msat=3, state="used", **common
    )
    PaymentAttempt.objects.create(
        payment_hash="b" * 64, amount_msat=5_000, state="pending", **common
    )
    assert "outbox_payments" not in exposition()
    with override_settings(OUTBOX_PAYMENTS={"CLIENT": "testproject.lightning.node.FakeNodeClient"}):
        text = exposition()
    assert 'outbox_payments{state="used"} 1.0' in text
    assert 'outbox_payments{state="pending"} 1.0' in text
    assert 'outbox_payments{state="failed"} 0.0' in text
    assert 'outbox_payments_amount_msat{state="used"} 2000.0' in text
    assert 'outbox_payments_fee_msat{state="used"} 3.0' in text

"""Pending payments of finished deliveries, resolved by the recovery pass within seconds.

Every pass asks the node about them (``lookup``, never ``pay``), on the payment
threads, waiting at most :data:`~django_outbox.payments.recovery.BUDGET`; with nothing
to resolve it costs one query.  On SQLite, with the fake LND.
"""

from __future__ import annotations

import time

import pytest
from django.test import override_settings
from pytest_django import DjangoAssertNumQueries

from django_outbox.broker.publish import use_publisher
from django_outbox.payments import recovery as payments_recovery
from django_outbox.payments.lookups import spent_today
from django_outbox.payments.models import PaymentAttempt
from django_outbox.payments.recovery import BUDGET, resolve_orphans_now
from django_outbox.upkeep import recovery_pass
from testproject.demo.keys import ACTOR
from testproject.lightning.l402_inbox import L402InboxServer
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode
from tests.support.broker import MemoryBroker
from tests.support.payment_rounds import PRICE, payments, round_of, send

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_caches")]


@pytest.fixture(autouse=True)
def _nothing_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """No lookup of an earlier test is waiting to be read."""
    monkeypatch.setattr(payments_recovery, "_asked", {})


def test_without_payments_the_step_asks_nothing(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    with django_assert_num_queries(0):
        assert resolve_orphans_now() == 0


@pytest.mark.usefixtures("configured")
def test_with_nothing_to_resolve_the_step_is_one_query(
    django_assert_num_queries: DjangoAssertNumQueries, inbox: L402InboxServer, lnd: FakeLndServer
) -> None:
    [pk] = send(inbox.url())
    round_of([pk])  # pending, its delivery live: not an orphan
    calls = len(lnd.calls)
    with django_assert_num_queries(1):
        assert resolve_orphans_now() == 0
    assert len(lnd.calls) == calls


def test_orphans_of_any_age_are_settled_by_asking_the_node(
    two_orphans: list[PaymentAttempt], node: FakeNode
) -> None:
    assert resolve_orphans_now() == 2
    paid, unpaid = PaymentAttempt.objects.order_by("id")
    assert (paid.state, len(paid.preimage)) == ("paid", 64)
    assert (unpaid.state, unpaid.reason) == ("failed", "its delivery finished before it was paid")
    assert spent_today(ACTOR) == PRICE  # the paid one kept, the failed one given back
    assert len(node.attempts) == 1  # asked, never paid
    assert resolve_orphans_now() == 0


def test_a_slow_node_costs_the_step_its_budget_and_its_answer_comes_next_pass(
    two_orphans: list[PaymentAttempt], lnd: FakeLndServer
) -> None:
    lnd.delay = 3 * BUDGET
    before = len([c for c in lnd.calls if c.method == "GET"])
    started = time.monotonic()
    assert resolve_orphans_now() == 0
    assert time.monotonic() - started < 3 * BUDGET  # the budget, not the node's time
    assert lnd.in_flight == 2  # both lookups still at the node
    assert resolve_orphans_now() == 0  # still waiting: not asked again
    lnd.delay = 0.0
    deadline = time.monotonic() + 30
    while lnd.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert resolve_orphans_now() == 2  # the answers of the first pass
    lookups = [c for c in lnd.calls if c.method == "GET"]
    assert len(lookups) - before == 2
    assert {a.state for a in PaymentAttempt.objects.all()} == {"paid", "failed"}


def test_the_recovery_pass_resolves_them(two_orphans: list[PaymentAttempt]) -> None:
    with use_publisher(MemoryBroker()):
        counts = recovery_pass.recover(judge_owners=False)
    assert counts["payments"] == 2
    assert set(PaymentAttempt.objects.values_list("state", flat=True)) == {"paid", "failed"}


def test_a_node_that_cannot_answer_leaves_them_pending_for_the_next_pass(
    two_orphans: list[PaymentAttempt], lnd: FakeLndServer
) -> None:
    """A node that refuses the macaroon: the lookups fail, nothing is settled, no raise."""
    wrong = {"url": lnd.url, "macaroon_hex": "00" * 32, "timeout": 5}
    with override_settings(OUTBOX_PAYMENTS={**payments(lnd), "OPTIONS": wrong}):
        assert resolve_orphans_now() == 0
    assert {a.state for a in PaymentAttempt.objects.all()} == {"pending"}
    assert resolve_orphans_now() == 2

"""Paying a host as fast as it charges: in parallel per message, at once once a token is bought.

How a host charges is learnt from what it does with its tokens: refusing a token it
accepted once (per message), or accepting one twice (it sells tokens).  A per-message
host's deliveries pay their own invoices, up to ``MAX_PARALLEL_PER_HOST`` at once,
each in a slot of its own; a payment that ends makes due the deliveries parked for its
host, on the priority lane, as is a delivery coming back to pay.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from django.db import IntegrityError, transaction
from django.test import override_settings
from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState, Lane
from django_outbox.payments.batches import Verdict
from django_outbox.payments.lookups import claim_lookup
from django_outbox.payments.models import PaymentAttempt, PaymentHost
from django_outbox.payments.opening import store_now
from django_outbox.payments.reports import PAID_AT_CLAIM, PAYING_ELSEWHERE, Challenge, OpenAttempt
from django_outbox.values.outcomes import AttemptResult
from testproject.demo.keys import ACTOR
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402InboxServer, Mode
from testproject.lightning.lnd import FakeLndServer
from testproject.lightning.node import FakeNode
from tests.support.broker import RecordingApp
from tests.support.payment_rounds import (
    PRICE,
    attempted,
    payments,
    recorded,
    round_of,
    send,
    serve,
)
from tests.unit.payments.test_paying import (
    BODY_SIZE,
    SETTINGS,
    Inbox,
    challenge_from,
    exchanged,
    job,
)

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("memory_caches", "worker_process"),
]


@pytest.fixture
def per_message(issuer: InvoiceIssuer) -> Iterator[L402InboxServer]:
    """An L402 inbox that charges for every message."""
    server = serve(issuer, mode=Mode.PER_MESSAGE)
    yield server
    server.stop()


@pytest.fixture
def three_at_once(lnd: FakeLndServer) -> Iterator[None]:
    """``OUTBOX_PAYMENTS`` with at most three payments under way per host."""
    with override_settings(OUTBOX_PAYMENTS=payments(lnd, MAX_PARALLEL_PER_HOST=3)):
        yield


def _due(ids: list[int]) -> set[int]:
    """Which of ``ids`` are queued and due now."""
    rows = Delivery.objects.filter(id__in=ids, state=DeliveryState.QUEUED)
    return set(rows.filter(next_attempt_at__lte=timezone.now()).values_list("id", flat=True))


@pytest.mark.django_db(transaction=True)  # payments are stored on the payment threads
@pytest.mark.usefixtures("three_at_once")
def test_a_per_message_host_is_paid_in_parallel_in_the_attempt_that_met_its_402(
    per_message: L402InboxServer, node: FakeNode, broker: RecordingApp
) -> None:
    PaymentHost.objects.create(host=per_message.host, per_message=True)
    ids = send(*(per_message.url(f"/{n}") for n in range(5)))
    sent = attempted(ids)
    assert sorted(o.result for o in sent) == ["delivered"] * 3
    paid = sorted(o.row.id for o in sent)
    assert [o.report.paid_msat for o in sent if o.report] == [PRICE] * 3
    # Each stored in a slot of its own, committed before the node was asked; still
    # pending until the recorder saves what the attempts report.
    pending = PaymentAttempt.objects.filter(state="pending")
    assert sorted(pending.values_list("slot", flat=True)) == [0, 1, 2]
    assert sorted(pending.values_list("delivery_id", flat=True)) == paid
    assert len(node.payments()) == 3
    parked = set(ids) - set(paid)
    held = Delivery.objects.filter(id__in=parked, last_error=PAID_AT_CLAIM)
    assert set(held.values_list("id", flat=True)) == parked
    assert not _due(list(parked))

    broker.clear()
    recorded(sent)
    # Three slots freed: the two parked deliveries are due at once, on the priority lane.
    assert _due(list(parked)) == parked
    assert set(broker.lanes()[Lane.PRIORITY]) == parked
    assert set(PaymentAttempt.objects.values_list("state", flat=True)) == {"used"}
    assert not claim_lookup([], [per_message.host]).tokens, "each token retired as used"
    assert {o.result for o in round_of(list(parked))} == {"delivered"}
    assert len(node.payments()) == 5


@pytest.mark.usefixtures("three_at_once")
def test_a_challenge_finding_every_slot_taken_is_held_not_stored(
    per_message: L402InboxServer, node: FakeNode, lnd: FakeLndServer
) -> None:
    """Slots taken by other workers' payments after this claim: held, nothing stored."""
    PaymentHost.objects.create(host=per_message.host, per_message=True)
    late, *first = send(*(per_message.url(f"/{n}") for n in range(4)))
    for pk in first:
        assert isinstance(
            store_now(pk, per_message.host, ACTOR, _challenge(per_message, lnd), THREE), OpenAttempt
        )
    held = store_now(late, per_message.host, ACTOR, _challenge(per_message, lnd), THREE)
    assert held == Verdict(AttemptResult.HELD, PAYING_ELSEWHERE, held.held_for)
    assert held.held_for is not None and held.held_for > 0
    assert PaymentAttempt.objects.filter(state="pending").count() == 3
    assert not PaymentAttempt.objects.filter(delivery_id=late).exists()
    assert node.payments() == []


@pytest.mark.usefixtures("configured")
def test_a_host_that_refuses_a_token_it_accepted_once_is_learnt_to_charge_per_message(
    per_message: L402InboxServer, node: FakeNode, broker: RecordingApp
) -> None:
    first, *others = send(*(per_message.url(f"/{n}") for n in range(4)))
    assert [o.result for o in round_of([first])] == ["paying"]
    parked = attempted(others)
    assert parked == [], "not known yet: one payment at a time, the others parked"
    broker.clear()
    assert [o.result for o in round_of([first])] == ["delivered"]
    # Its token bought, the parked deliveries come at once to try it.
    assert _due(others) == set(others)
    assert set(broker.lanes()[Lane.PRIORITY]) == set(others)
    outcomes = round_of(others)  # the token refused: per message, each pays its own
    assert [o.result for o in outcomes] == ["paying"] * 3
    assert PaymentHost.objects.get(host=per_message.host).per_message
    assert PaymentAttempt.objects.filter(state="pending").count() == 3
    assert {o.result for o in round_of(others)} == {"delivered"}
    assert len(node.payments()) == 4


@pytest.mark.usefixtures("configured")
def test_a_host_learnt_to_charge_per_message_has_its_due_deliveries_published_ahead(
    per_message: L402InboxServer, broker: RecordingApp
) -> None:
    """Deliveries due to it go on the priority lane at once, each to pay its own, rather
    than wait for their lanes' backlogs to reach them."""
    first, second = send(per_message.url("/1"), per_message.url("/2"))
    round_of([first])
    assert [o.result for o in round_of([first])] == ["delivered"]  # a token kept
    [waiting] = send(per_message.url("/3"))
    broker.clear()
    assert [o.result for o in round_of([second])] == ["paying"]  # the token refused
    assert PaymentHost.objects.get(host=per_message.host).per_message
    assert waiting in broker.lanes()[Lane.PRIORITY]
    assert _due([waiting]) == {waiting}


@pytest.mark.usefixtures("configured")
def test_a_host_that_takes_a_token_twice_sells_tokens_and_frees_all_its_waiting(
    inbox: L402InboxServer, node: FakeNode, broker: RecordingApp
) -> None:
    first, second, *others = send(*(inbox.url(f"/{n}") for n in range(6)))
    round_of([first])
    assert attempted([second, *others]) == []
    round_of([first])
    assert _due([second, *others]) == {second, *others}
    Delivery.objects.filter(id__in=others).update(next_attempt_at=timezone.now().replace(year=2100))
    assert [o.result for o in round_of([second])] == ["delivered"]
    assert PaymentHost.objects.get(host=inbox.host).per_message is False
    assert _due(others) == set(others), "a token seller: every parked delivery goes"
    assert {o.result for o in round_of(others)} == {"delivered"}
    assert len(node.payments()) == 1


@pytest.mark.usefixtures("configured")
def test_never_two_payments_under_way_for_one_delivery(
    per_message: L402InboxServer, lnd: FakeLndServer
) -> None:
    PaymentHost.objects.create(host=per_message.host, per_message=True)
    [pk] = send(per_message.url())
    store_now(pk, per_message.host, ACTOR, _challenge(per_message, lnd), THREE)
    attempt = PaymentAttempt.objects.get()
    attempt.pk, attempt.payment_hash, attempt.slot = None, "ab" * 32, 1
    with pytest.raises(IntegrityError), transaction.atomic():
        attempt.save()


#: Payment settings with three slots per host, for :func:`store_now` called by hand.
THREE = replace(SETTINGS, max_parallel_per_host=3)


def _challenge(server: L402InboxServer, lnd: FakeLndServer) -> Challenge:
    """A checked challenge of a new invoice from ``server``, met by an attempt."""
    met = exchanged(job(lnd, per_message=True), server.url(), BODY_SIZE, Inbox(server.gate))
    return challenge_from(met)

"""A send's deliveries to hosts that charge per message or keep a token are published on
the priority lane, ahead of the unpaid backlog of their message's lane; their rows keep
that lane."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError
from django.utils import timezone

from django_outbox import outbox
from django_outbox.models import Delivery, Lane, Message
from django_outbox.payments.models import PaymentHost
from django_outbox.payments.served_first import paid_hosts
from testproject.demo.keys import ACTOR
from tests.support.broker import RecordingApp
from tests.support.payment_rounds import NOTE
from tests.unit.payments.test_ledger_reads import attempt

pytestmark = pytest.mark.django_db

PER_MESSAGE, TOKENS, KEPT, EXPIRED, RETIRED, FREE = (f"127.0.4.{n}" for n in range(2, 8))


def _paid_hosts_known() -> None:
    PaymentHost.objects.create(host=PER_MESSAGE, per_message=True)
    PaymentHost.objects.create(host=TOKENS, per_message=False)  # no token kept now
    past, now = timezone.now() - timedelta(seconds=1), timezone.now()
    attempt("a" * 64, "used", host=KEPT, paid_at=now)
    attempt("b" * 64, "used", host=EXPIRED, paid_at=now, expires_at=past)
    attempt("c" * 64, "used", host=RETIRED, paid_at=now, retired_at=now)


def test_the_hosts_served_first_charge_per_message_or_keep_a_token() -> None:
    _paid_hosts_known()
    attempt("d" * 64, "used", host=KEPT, paid_at=timezone.now())  # two tokens: one host
    hosts = {PER_MESSAGE, TOKENS, KEPT, EXPIRED, RETIRED, FREE}
    assert paid_hosts(hosts) == {PER_MESSAGE, KEPT}
    assert paid_hosts(hosts - {PER_MESSAGE}) == {KEPT}
    assert paid_hosts(set()) == set()


@pytest.mark.usefixtures("configured")
def test_a_sends_deliveries_to_paid_hosts_go_on_the_priority_lane(
    broker: RecordingApp, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    _paid_hosts_known()
    hosts = [PER_MESSAGE, TOKENS, KEPT, EXPIRED, RETIRED, FREE]
    with django_capture_on_commit_callbacks(execute=True):
        message = outbox.send(ACTOR, NOTE, [f"https://{host}/inbox" for host in hosts])
    assert message is not None and message.lane == Lane.DEFAULT  # six inboxes
    rows = dict(Delivery.objects.values_list("host", "id"))
    lanes = broker.lanes()
    assert lanes[Lane.PRIORITY] == sorted([rows[PER_MESSAGE], rows[KEPT]])
    others = (TOKENS, EXPIRED, RETIRED, FREE)
    assert sorted(lanes[Lane.DEFAULT]) == sorted(rows[host] for host in others)
    assert set(Delivery.objects.values_list("lane", flat=True)) == {Lane.DEFAULT}


def test_without_payments_every_delivery_goes_on_its_messages_lane(
    broker: RecordingApp, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    _paid_hosts_known()
    with django_capture_on_commit_callbacks(execute=True):
        outbox.send(ACTOR, NOTE, [f"https://127.0.4.{n}/inbox" for n in range(2, 9)])
    assert broker.lanes() == {Lane.DEFAULT: sorted(Delivery.objects.values_list("id", flat=True))}


@pytest.mark.usefixtures("configured")
def test_a_send_whose_paid_hosts_lookup_fails_raises_and_writes_nothing(
    broker: RecordingApp,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    def lookup_fails(hosts: object) -> set[str]:
        raise DatabaseError("injected: the paid hosts' lookup failed")

    monkeypatch.setattr("django_outbox.payments.extension.paid_hosts", lookup_fails)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(DatabaseError):
        outbox.send(ACTOR, NOTE, [f"https://127.0.4.{n}/inbox" for n in range(2, 9)])
    assert not Message.objects.exists() and not Delivery.objects.exists()
    assert broker.lanes() == {}
    # A small send travels on the priority lane already: no lookup is made for it.
    with django_capture_on_commit_callbacks(execute=True):
        outbox.send(ACTOR, NOTE, [f"https://{KEPT}/inbox"])
    assert broker.lanes() == {Lane.PRIORITY: list(Delivery.objects.values_list("id", flat=True))}

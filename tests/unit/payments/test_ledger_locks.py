"""Two workers' ledgers storing payments for one host at once, on PostgreSQL.

A ledger transaction that has stored an attempt holds its host's slot (a unique key)
until it commits.  Had another ledger raised the sender's budget first and then met
that slot, while the first went on to raise the same budget, each would wait for the
other: PostgreSQL would roll one back (a deadlock), and its worker would save the whole
batch again after a pause.  Each ledger takes the budget row first
(:func:`~django_outbox.payments.budget.lock_day`), so the second waits before it has
stored anything, and then finds the slot taken.  A delivery's own store
(:func:`~django_outbox.payments.opening.store_now`) takes it first with its reservation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections
from django.test import override_settings

from django_outbox.conf import conf
from django_outbox.payments import ledger, opening, paying
from django_outbox.payments.batches import Verdict
from django_outbox.payments.models import PaymentAttempt, PaymentBudget, PaymentHost
from django_outbox.payments.reports import OpenAttempt
from django_outbox.values.outcomes import Outcome
from testproject.demo.keys import ACTOR
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402Gate, L402InboxServer, Mode
from testproject.lightning.lnd import FakeLndServer
from tests.support.payment_rounds import PRICE, attempted, payments, send, serve
from tests.unit.payments.test_ledger_reads import challenge

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("memory_caches", "worker_process"),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite's writers take turns"),
]


@pytest.fixture
def per_message(issuer: InvoiceIssuer) -> Iterator[tuple[L402InboxServer, L402InboxServer]]:
    """Two L402 inboxes on two hosts that charge for every message."""
    servers = (
        serve(issuer, mode=Mode.PER_MESSAGE),
        L402InboxServer(L402Gate(issuer, price_msat=PRICE, mode=Mode.PER_MESSAGE), "127.0.0.2"),
    )
    servers[1].start()
    yield servers
    for server in servers:
        server.stop()


def _waiting_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return int(cursor.fetchone()[0])


def _pause_after_storing(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[threading.Event, threading.Event]:
    """Thread A pauses once it has stored its attempt (its slot held, uncommitted): it
    sets the first event, and goes on when the second is set."""
    paused, go = threading.Event(), threading.Event()
    insert = opening.insert

    def insert_then_pause(row: PaymentAttempt) -> PaymentAttempt | None:
        stored = insert(row)
        if threading.current_thread().name == "A":
            paused.set()
            assert go.wait(10)
        return stored

    monkeypatch.setattr(opening, "insert", insert_then_pause)
    return paused, go


def _in_thread(name: str, work: Callable[[], Any], errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            work()
        except BaseException as error:
            errors.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def test_two_ledgers_paying_one_host_at_once_take_turns_instead_of_deadlocking(
    per_message: tuple[L402InboxServer, L402InboxServer],
    lnd: FakeLndServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host, other = per_message
    with override_settings(OUTBOX_PAYMENTS=payments(lnd)):
        first, second = send(host.url("/1"), host.url("/2"))
        [elsewhere] = send(other.url("/1"))
        # Not known yet to charge per message, so the recorder stores what they met (once
        # known, each attempt stores its own); two processes met the first host's 402.
        met: dict[int, Outcome] = {o.row.id: o for o in attempted([first, elsewhere])}
        paying._challenged.clear()
        met.update({o.row.id: o for o in attempted([second])})
        settings = conf.PAYMENTS
    for server in per_message:
        PaymentHost.objects.create(host=server.host, per_message=True)
    assert settings is not None and {o.result for o in met.values()} == {"paying"}
    paused, go = _pause_after_storing(monkeypatch)
    errors: list[BaseException] = []
    a = _in_thread("A", lambda: ledger.record_payments([met[first]], settings), errors)
    assert paused.wait(10)
    b = _in_thread(
        "B", lambda: ledger.record_payments([met[elsewhere], met[second]], settings), errors
    )
    deadline = time.monotonic() + 10
    while _waiting_locks() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # B waits for A, on the budget row (or, unordered, on A's slot)
    go.set()
    a.join(15)
    b.join(15)
    assert errors == []
    slots = PaymentAttempt.objects.filter(host=host.host, state="pending")
    assert sorted(slots.values_list("slot", flat=True)) == [0, 1]
    spent = PaymentBudget.objects.get().spent_msat
    assert spent == 3 * (PRICE + settings.max_fee_msat)


def test_two_deliveries_storing_their_payments_to_one_host_at_once_take_turns(
    per_message: tuple[L402InboxServer, L402InboxServer],
    lnd: FakeLndServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two payment threads store the 402s their deliveries met at one host: the second
    waits at its reservation (the budget row) until the first commits, then reads the
    slot it took and takes the next, rather than meeting its uncommitted row."""
    host = per_message[0]
    PaymentHost.objects.create(host=host.host, per_message=True)
    with override_settings(OUTBOX_PAYMENTS=payments(lnd)):
        first, second = send(host.url("/1"), host.url("/2"))
        settings = conf.PAYMENTS
    assert settings is not None
    paused, go = _pause_after_storing(monkeypatch)
    stored: dict[str, OpenAttempt | Verdict] = {}
    errors: list[BaseException] = []

    def store(name: str, delivery_id: int, payment_hash: str) -> Callable[[], None]:
        def run() -> None:
            assert settings is not None
            made = opening.store_now(
                delivery_id, host.host, ACTOR, challenge(payment_hash), settings
            )
            stored[name] = made

        return run

    a = _in_thread("A", store("A", first, "a" * 64), errors)
    assert paused.wait(10)
    b = _in_thread("B", store("B", second, "b" * 64), errors)
    deadline = time.monotonic() + 10
    while _waiting_locks() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # B waits for A on the budget row
    go.set()
    a.join(15)
    b.join(15)
    assert errors == []
    assert {name: type(made).__name__ for name, made in stored.items()} == {
        "A": "OpenAttempt",
        "B": "OpenAttempt",
    }
    slots = PaymentAttempt.objects.order_by("slot").values_list("delivery_id", "slot")
    assert list(slots) == [(first, 0), (second, 1)]
    assert PaymentBudget.objects.get().spent_msat == 2 * (PRICE + settings.max_fee_msat)

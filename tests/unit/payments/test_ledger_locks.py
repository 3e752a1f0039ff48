"""Two workers' ledgers storing payments for one host at once, on PostgreSQL.

A ledger transaction that has stored an attempt holds its host's slot (a unique key)
until it commits.  Had another ledger raised the sender's budget first and then met
that slot, while the first went on to raise the same budget, each would wait for the
other: PostgreSQL would roll one back (a deadlock), and its worker would save the whole
batch again after a pause.  Each ledger takes the budget row first
(:func:`~django_outbox.payments.budget.lock_day`), so the second waits before it has
stored anything, and then finds the slot taken.
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
from django_outbox.payments import budget, ledger, paying
from django_outbox.payments.models import PaymentAttempt, PaymentBudget, PaymentHost
from django_outbox.values.outcomes import Outcome
from testproject.lightning.issuer import InvoiceIssuer
from testproject.lightning.l402_inbox import L402Gate, L402InboxServer, Mode
from testproject.lightning.lnd import FakeLndServer
from tests.support.payment_rounds import PRICE, attempted, payments, send, serve

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
    paused, go = threading.Event(), threading.Event()
    reserve = budget.reserve

    def reserve_later(*args: Any) -> bool:
        if threading.current_thread().name == "A":  # it has stored its attempt by now
            paused.set()
            assert go.wait(10)
        return reserve(*args)

    monkeypatch.setattr(budget, "reserve", reserve_later)
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

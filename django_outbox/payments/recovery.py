"""Resolve payments no delivery will come back for, within a time budget.

A pending attempt belongs to its delivery, whose next claim asks the node about it.
When that delivery is finished without it (given up, refused) or pruned, nobody
would, and the pending row would keep every other delivery to its host waiting.
:func:`resolve_orphans` asks the node (``lookup``, never ``pay``): complete makes it
paid (the money is gone, the record says so), failed or never started makes it failed
(the budget is given back), in flight leaves it for the next pass.

The workers' recovery pass calls :func:`resolve_orphans_now` every heartbeat, and
the sweeper :func:`resolve_orphans` every sweep.  Either costs one query when there is
nothing to resolve: it reads the pending attempts (one per host and slot at most)
through the partial unique index that keeps them so.  The node
calls run on the payment threads, each bounded by the client's timeout; the caller
waits for them at most ``budget`` seconds, and a call still under way then is not
asked again: the next pass takes its answer.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, wait
from threading import Lock

from django_outbox.conf import conf
from django_outbox.payments.clients import PaymentState, PaymentStatus
from django_outbox.payments.errors import PaymentClientError
from django_outbox.payments.ledger import settle
from django_outbox.payments.lookups import orphans
from django_outbox.payments.paying import payment_client
from django_outbox.payments.reports import Change, Settlement
from django_outbox.payments.settings import PaymentSettings
from django_outbox.payments.threads import payment_threads

logger = logging.getLogger("django_outbox.payments")

#: Seconds a pending attempt is left to its delivery's worker before the sweeper asks.
GRACE = 60.0
#: Seconds one call waits for the node's answers at most.
BUDGET = 1.0

_lock = Lock()
#: Lookups asked and not yet answered (or not yet read), by attempt id.
_asked: dict[int, Future[PaymentStatus]] = {}


def resolve_orphans(settings: PaymentSettings, grace: float = GRACE, budget: float = BUDGET) -> int:
    """Settle the pending attempts of finished or pruned deliveries created more than
    ``grace`` seconds ago, waiting at most ``budget`` seconds for the node; how many."""
    found = orphans(grace)
    with _lock:
        wanted = {attempt_id for attempt_id, _ in found}
        for gone in [key for key, future in _asked.items() if key not in wanted and future.done()]:
            del _asked[gone]  # resolved meanwhile by its delivery, or by another process
    if not found:
        return 0
    client, threads = payment_client(settings), payment_threads(settings)
    with _lock:
        futures = {
            attempt_id: _asked.get(attempt_id) or threads.submit(client.lookup, payment_hash)
            for attempt_id, payment_hash in found
        }
        _asked.update(futures)
    wait(futures.values(), timeout=max(0.0, budget))
    settlements: list[Settlement] = []
    for attempt_id, future in futures.items():
        if not future.done():
            continue
        with _lock:
            _asked.pop(attempt_id, None)
        settlement = _settlement(attempt_id, future)
        if settlement is not None:
            settlements.append(settlement)
    settle(settlements)
    return len(settlements)


def resolve_orphans_now() -> int:
    """The recovery pass's step: the orphans of any age, within :data:`BUDGET`
    (nothing when payments are off)."""
    settings = conf.PAYMENTS
    return resolve_orphans(settings, grace=0.0) if settings is not None else 0


def _settlement(attempt_id: int, future: Future[PaymentStatus]) -> Settlement | None:
    """What the node's answer makes of an orphan: paid, failed, or nothing yet."""
    if future.cancelled():
        return None
    try:
        status = future.result()
    except PaymentClientError as error:
        logger.warning("could not ask the node about payment attempt %s: %s", attempt_id, error)
        return None
    except Exception as error:  # a client's fault must not keep the other orphans waiting
        logger.warning("the payment client failed on attempt %s: %r", attempt_id, error)
        return None
    if status.state is PaymentState.COMPLETE and status.payment is not None:
        payment = status.payment
        return Settlement(
            attempt_id, Change.PAID, preimage=payment.preimage.hex(), fee_msat=payment.fee_msat
        )
    if status.state in (PaymentState.FAILED, PaymentState.UNKNOWN):
        reason = "its delivery finished before it was paid"
        return Settlement(attempt_id, Change.FAILED, reason=reason)
    return None

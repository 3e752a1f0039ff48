"""The sweeper's part in paid push: resolve payments no delivery will come back for.

A pending attempt belongs to its delivery, whose next claim asks the node about it.
When that delivery is finished without it (given up, refused) or pruned, nobody
would, and the pending row would keep every other delivery to its host waiting.
The sweeper asks the node (``lookup``, never ``pay``): complete makes it paid (the
money is gone, the record says so), failed or never started makes it failed (the
budget is given back), in flight leaves it for the next sweep.
"""

from __future__ import annotations

import logging

from django_outbox.payments.clients import PaymentState
from django_outbox.payments.errors import PaymentClientError
from django_outbox.payments.ledger import settle
from django_outbox.payments.lookups import orphans
from django_outbox.payments.paying import payment_client
from django_outbox.payments.reports import Change, Settlement
from django_outbox.payments.settings import PaymentSettings

logger = logging.getLogger("django_outbox.payments")

#: Seconds a pending attempt is left to its delivery's worker before the sweeper asks.
GRACE = 60.0


def resolve_orphans(settings: PaymentSettings, grace: float = GRACE) -> int:
    """Settle the pending attempts of finished or pruned deliveries; how many were."""
    client = payment_client(settings)
    settlements: list[Settlement] = []
    for attempt_id, payment_hash in orphans(grace):
        try:
            status = client.lookup(payment_hash)
        except PaymentClientError as error:
            logger.warning("could not ask the node about payment %s: %s", payment_hash[:16], error)
            continue
        if status.state is PaymentState.COMPLETE and status.payment is not None:
            payment = status.payment
            settlements.append(
                Settlement(
                    attempt_id,
                    Change.PAID,
                    preimage=payment.preimage.hex(),
                    fee_msat=payment.fee_msat,
                )
            )
        elif status.state in (PaymentState.FAILED, PaymentState.UNKNOWN):
            reason = "its delivery finished before it was paid"
            settlements.append(Settlement(attempt_id, Change.FAILED, reason=reason))
    settle(settlements)
    return len(settlements)

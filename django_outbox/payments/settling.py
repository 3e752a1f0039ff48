"""The payment step of an attempt, on a payment thread: bring a stored attempt to a preimage.

A stored attempt is paid only after the node is asked whether it already was
(:func:`settle_open`), unless this step stored it, and only while what is left of the
delivery's lease covers the node calls and the request after them
(:func:`payment_seconds`).  A delivery to a host
known to charge per message first stores the challenge it just met
(:func:`store_and_settle`: committed, then paid, in one step): the attempt that met the
402 goes on to pay it and send again.  Each step notes what it changed on a
:class:`Trail`, which the attempt's outcome carries to the recorder.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, Protocol

from django.db import DatabaseError, connections

from django_outbox.conf import conf
from django_outbox.extensions import Exchange
from django_outbox.payments.batches import Verdict
from django_outbox.payments.clients import Payment, PaymentClient, PaymentState
from django_outbox.payments.errors import (
    PaymentClientError,
    PaymentFailed,
    PaymentRefused,
    PreimageMismatch,
)
from django_outbox.payments.opening import store_now
from django_outbox.payments.reports import (
    Challenge,
    Change,
    OpenAttempt,
    PaymentReport,
    Settlement,
)
from django_outbox.payments.settings import PaymentSettings
from django_outbox.values.claimed import ClaimedRow
from django_outbox.values.outcomes import AttemptResult

#: Node calls one payment step may make: a lookup, the payment, and the lookup that a
#: payment the node refuses ("already paid", "in transition") asks for.
NODE_CALLS = 3
#: Seconds one node call is taken to last at most when the client declares no ``timeout``.
ASSUMED_TIMEOUT = 60.0
#: Seconds kept after the request for the recorder to save its outcome (as for every send).
SAVE_MARGIN = 10.0


class Payer(Protocol):
    """What the payment step reads of a claimed delivery's payment job
    (:class:`~django_outbox.payments.paying.PaymentJob`)."""

    @property
    def settings(self) -> PaymentSettings:
        """The payment settings the claim read."""

    @property
    def client(self) -> PaymentClient:
        """The process's payment client."""

    @property
    def lease_ends(self) -> float:
        """Monotonic time at which the delivery's lease ends."""

    @property
    def row(self) -> ClaimedRow | None:
        """The claimed delivery (None: a job made by hand, which stores nothing)."""

    @property
    def sender(self) -> str:
        """The actor whose message it is, whose daily budget pays."""


class Trail:
    """The settlements of one exchange, gathered as it goes (``per_message``: its claim
    knew the host charges per message)."""

    def __init__(self, per_message: bool = False) -> None:
        self.settlements: list[Settlement] = []
        self.paid_msat = 0
        self.per_message = per_message

    def add(self, attempt_id: int, change: Change, **details: Any) -> None:
        """Note a change of the stored attempt ``attempt_id``."""
        self.settlements.append(Settlement(attempt_id, change, **details))

    def report(self, challenge: Challenge | None = None) -> PaymentReport | None:
        """What to record: the changes noted, and ``challenge`` to store (None: nothing)."""
        if not self.settlements and challenge is None:
            return None
        return PaymentReport(
            tuple(self.settlements), challenge, self.paid_msat, per_message=self.per_message
        )

    def ends(self, result: AttemptResult, error: str, **extra: Any) -> Exchange:
        """The exchange ending as ``result``, with the changes noted."""
        return Exchange(result=result, error=error, report=self.report(), **extra)


def payment_seconds(client: PaymentClient) -> float:
    """The longest a payment step and the request after it may take, in seconds:
    :data:`NODE_CALLS` calls of the client's ``timeout`` (:data:`ASSUMED_TIMEOUT` if it
    declares none), two knocks of ``OUTBOX_TOTAL_TIMEOUT`` and :data:`SAVE_MARGIN`."""
    timeout = getattr(client, "timeout", None)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        timeout = ASSUMED_TIMEOUT
    return NODE_CALLS * float(timeout) + 2 * conf.TOTAL_TIMEOUT + SAVE_MARGIN


def _lease_refusal(job: Payer, trail: Trail) -> Exchange | None:
    """Why the payment step must not start now, or None: the delivery's lease cannot
    cover it (given back unpaid, for a claim with a fresh lease), or no lease could
    (``OUTBOX_LEASE_SECONDS`` too short for the client: retried, and check E017 says so)."""
    needed, lease = payment_seconds(job.client), conf.LEASE_SECONDS
    if needed > lease:
        error = (
            f"internal: a payment and its request may take {needed:g} s, more than the "
            f"{lease:g} s lease (OUTBOX_LEASE_SECONDS)"
        )
        return trail.ends(AttemptResult.RETRY, error)
    left = job.lease_ends - time.monotonic()
    if left < needed:
        error = (
            f"released: {max(0.0, left):.0f} s left of its lease cannot cover a payment "
            f"and its request ({needed:g} s)"
        )
        return trail.ends(AttemptResult.RELEASED, error)
    return None


def _checked(payment: Payment, attempt: OpenAttempt) -> str:
    """The payment's preimage as hex, if it is the attempt's; else :class:`PreimageMismatch`."""
    if (
        payment.payment_hash.lower() != attempt.payment_hash
        or hashlib.sha256(payment.preimage).hexdigest() != attempt.payment_hash
    ):
        raise PreimageMismatch(f"the client's preimage is not that of {attempt.payment_hash[:16]}")
    return payment.preimage.hex()


def settle_open(
    job: Payer, attempt: OpenAttempt, trail: Trail, *, stored_now: bool = False
) -> str | Exchange | None:
    """Bring the delivery's open ``attempt`` to a preimage: the ``Authorization`` to send,
    an :class:`Exchange` that ends the attempt, or None (nothing usable: send bare).

    The node is asked first what became of the payment, unless ``stored_now``: the
    attempt was stored (or reopened after the node said it failed) by this very step, so
    none of its payments can have been made or be in flight.  Had anyone paid its
    invoice anyway, the payee's node takes no second payment of one payment hash, and
    the clients then report the first (:func:`~.clients.settle_refusal`)."""
    client, settings = job.client, job.settings
    now = time.time()
    if attempt.state == "paid" and attempt.preimage:
        return attempt.authorization(attempt.preimage)
    refusal = _lease_refusal(job, trail)
    if refusal is not None:
        return refusal
    try:
        status = None if stored_now else client.lookup(attempt.payment_hash)
        state = PaymentState.UNKNOWN if status is None else status.state
        if state is PaymentState.PENDING:
            error = f"payment {attempt.payment_hash[:16]} is in flight; asking again later"
            return trail.ends(AttemptResult.RETRY, error)
        if status is not None and state is PaymentState.COMPLETE and status.payment is not None:
            payment = status.payment
        elif now >= attempt.expires_at or now + settings.expiry_affordance >= (
            attempt.invoice_expires_at
        ):
            trail.add(attempt.attempt_id, Change.FAILED, reason="the invoice ran out unpaid")
            return None
        else:
            payment = client.pay(attempt.invoice, attempt.pay_amount_msat, settings.max_fee_msat)
        preimage = _checked(payment, attempt)
    except PaymentFailed as failure:
        trail.add(attempt.attempt_id, Change.FAILED, reason=str(failure)[:500])
        return trail.ends(AttemptResult.RETRY, f"payment failed: {failure.reason[:200]}")
    except PaymentRefused as refusal:
        trail.add(attempt.attempt_id, Change.FAILED, reason=str(refusal)[:500])
        return trail.ends(AttemptResult.REFUSED, f"payment refused: {refusal}")
    except PaymentClientError as error:
        return trail.ends(AttemptResult.RETRY, f"payment client: {error}"[:500])
    read = attempt.reserved_msat if attempt.state == "pending" else None
    trail.add(
        attempt.attempt_id,
        Change.PAID,
        preimage=preimage,
        fee_msat=payment.fee_msat,
        reserved_msat=read,
    )
    if now >= attempt.expires_at:
        reason = "paid, but the token's lifetime ended before it was used"
        trail.add(attempt.attempt_id, Change.REJECTED, reason=reason)
        return None
    return attempt.authorization(preimage)


def store_and_settle(
    job: Payer, challenge: Challenge, trail: Trail
) -> tuple[OpenAttempt, str] | Exchange | None:
    """Store ``challenge`` as the claimed delivery's pending attempt (committed), then pay
    it as :func:`settle_open` does, without asking the node first: the attempt and the
    ``Authorization`` to send, an :class:`Exchange` that ends the attempt (held or refused
    by the ledger, the payment failed or not started), or None (its invoice ran out
    before it could be paid).

    A database that fails the store ends the attempt for a retry, nothing paid; this
    thread's connection is closed so that the next store opens a fresh one."""
    assert job.row is not None
    try:
        stored = store_now(job.row.id, job.row.host, job.sender, challenge, job.settings)
    except DatabaseError as error:
        connections.close_all()
        return trail.ends(AttemptResult.RETRY, f"internal: storing its payment: {error}"[:500])
    if isinstance(stored, Verdict):
        return trail.ends(stored.result, stored.error, held_for=stored.held_for)
    settled = settle_open(job, stored, trail, stored_now=True)
    return (stored, settled) if isinstance(settled, str) else settled

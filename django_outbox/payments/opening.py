"""Storing a checked ``402`` challenge as a pending attempt, committed before anything is paid.

Two callers.  The recorder stores the challenges of a batch of outcomes
(:func:`~django_outbox.payments.ledger.record_payments`), and their deliveries come
back to pay.  A delivery to a host known to charge per message stores its own at once
(:func:`store_now`, on a payment thread, in a transaction of its own) and pays it in the
same attempt: one claim, one trip through the broker and one recording instead of two.
Either way the attempt takes a free slot of its host's, within the sender's budget, and
the invoice's earlier attempt (its payment hash is unique) decides whether it may be
paid again (:mod:`~django_outbox.payments.served_again`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from django_outbox.payments import budget
from django_outbox.payments.batches import LedgerBatch, Verdict
from django_outbox.payments.lookups import (
    bought_meanwhile,
    challenge_lookup,
    day_of,
    open_attempt_of,
    spent_today,
)
from django_outbox.payments.models import PaymentAttempt, PaymentState
from django_outbox.payments.reports import BOUGHT_MEANWHILE, Challenge, OpenAttempt
from django_outbox.payments.served_again import conflict, reopenable, served_again
from django_outbox.payments.settings import PaymentSettings
from django_outbox.payments.statements import insert
from django_outbox.values.outcomes import AttemptResult


def store_now(
    delivery_id: int, host: str, sender: str, challenge: Challenge, settings: PaymentSettings
) -> OpenAttempt | Verdict:
    """Store the challenge a delivery of ``sender``'s met at ``host`` as its pending
    attempt, committed when this returns: the attempt to pay now, or why it is held or
    refused instead.

    For a delivery still claimed by the caller, whose attempt pays it next, to a host
    that charges per message as its claim read.  Its first statement reserves from the
    sender's day, which locks the day's budget row as the recorder's ledger locks it
    first (see :func:`~django_outbox.payments.budget.lock_day`), so no separate lock is
    taken.  Raises what the database raises: nothing is stored then, and nothing may be
    paid."""
    batch = LedgerBatch(settings)
    batch.effects.learnt(host, True)
    with transaction.atomic():
        opened = open_attempt(delivery_id, host, sender, challenge, batch)
    batch.effects.signals.send()
    return opened if isinstance(opened, Verdict) else open_attempt_of(opened)


def open_attempt(
    delivery_id: int, host: str, sender: str, challenge: Challenge, batch: LedgerBatch
) -> PaymentAttempt | Verdict:
    """Store ``challenge`` as a pending attempt of the delivery, within budget: the row
    as stored, or what the delivery is to do instead (in the caller's transaction).

    The price and the most fee are reserved from the sender's day first, which locks its
    budget row: two stores for one sender take turns from here, so that the second reads
    the slot and the invoice the first stored.  Whatever is not stored gives the
    reservation back; what is stored, or what becomes of the delivery, is :func:`_open`'s
    to say (a delivery over the budget is held only where it would have paid)."""
    settings = batch.settings
    now = timezone.now()
    day, reserve = day_of(now), challenge.amount_msat + settings.max_fee_msat
    reserved = budget.reserve(sender, day, reserve, settings.daily_budget_msat)
    fields = {
        "payment_hash": challenge.payment_hash,
        "delivery_id": delivery_id,
        "sender": sender,
        "host": host,
        "destination": challenge.destination,
        "scheme": challenge.scheme,
        "invoice": challenge.invoice,
        "macaroon": challenge.macaroon,
        "amount_msat": challenge.amount_msat,
        "pay_amount_msat": challenge.pay_amount_msat,
        "reserved_msat": reserve,
        "created_at": now,
        "invoice_expires_at": datetime.fromtimestamp(challenge.invoice_expires_at, tz=UTC),
        "expires_at": now + timedelta(seconds=settings.token_lifetime),
    }
    opened = _open(challenge, batch, fields, reserved)
    if reserved and not isinstance(opened, PaymentAttempt):
        budget.give_back(sender, day, reserve)
    return opened


def _open(
    challenge: Challenge, batch: LedgerBatch, fields: dict[str, Any], reserved: bool
) -> PaymentAttempt | Verdict:
    """Store the attempt ``fields`` (all but its slot), whose price ``reserved`` says was
    reserved: the row, or the verdict.

    The attempt takes a free slot of its host's (one on a host that sells tokens,
    ``MAX_PARALLEL_PER_HOST`` on one that charges per message).  With none free (payments
    stored by this batch, or committed) it is not tried: the unique constraint would
    refuse it.  The host's slots are read with the invoice's history (one statement), and
    a delivery held for want of a slot is held whatever that history says (the payments
    it made are counted when it meets a 402 with a slot free).  An invoice stored before
    is paid again only if it failed unpaid: that attempt is reopened for this delivery.
    Only an attempt that would be stored is held for the budget, until the next day.
    A new invoice at a host that charges per message (most paid deliveries) is one
    ``INSERT`` that a unique key may skip, with no savepoint; the rest go through
    :func:`_undoable`."""
    settings, delivery_id, host = batch.settings, fields["delivery_id"], fields["host"]
    history = None
    if host not in batch.slots:  # read with the invoice's history, in one statement
        history = challenge_lookup(delivery_id, challenge, host)
        batch.slots[host] = history.slots or set()
    slot = batch.free_slot(host)
    if slot is None:
        return batch.held_while_paying(host)
    made, earlier, _ = history or challenge_lookup(delivery_id, challenge)
    if made >= settings.max_payments_per_delivery:
        error = (
            f"payment refused: paid {settings.max_payments_per_delivery} times and the "
            f"destination never accepted (asked {challenge.amount_msat} msat, invoice "
            f"{challenge.payment_hash[:12]})"
        )
        return Verdict(AttemptResult.REFUSED, error)
    if earlier is not None and not reopenable(earlier):
        return served_again(delivery_id, host, earlier, batch)
    if not reserved:
        return _over_budget(challenge, batch, fields)
    fields = {**fields, "slot": slot}
    # A host that charges per message opens nothing with another delivery's token.
    shared = not batch.effects.per_message(host)
    if earlier is None and not shared:
        stored: PaymentAttempt | Verdict | None = insert(PaymentAttempt(**fields))
    else:
        stored = _undoable(delivery_id, earlier, fields, shared, settings)
    if stored is None:
        return conflict(delivery_id, host, challenge, batch)
    if isinstance(stored, PaymentAttempt):
        batch.taken(host).add(slot)
    return stored


def _over_budget(challenge: Challenge, batch: LedgerBatch, fields: dict[str, Any]) -> Verdict:
    """The delivery held to the next day: paying would pass its sender's budget today
    (and ``payment_budget_exceeded`` is sent once the batch commits)."""
    settings, sender, now = batch.settings, fields["sender"], fields["created_at"]
    batch.effects.signals.over_budget.append(
        {
            "delivery": fields["delivery_id"],
            "actor": sender,
            "day": day_of(now),
            "spent_msat": spent_today(sender),
            "budget_msat": settings.daily_budget_msat,
            "amount_msat": challenge.amount_msat,
        }
    )
    error = f"held: paying {challenge.amount_msat} msat would pass today's budget"
    return Verdict(AttemptResult.HELD, error, budget.seconds_to_next_day(now))


def _undoable(
    delivery_id: int,
    earlier: PaymentAttempt | None,
    fields: dict[str, Any],
    shared: bool,
    settings: PaymentSettings,
) -> PaymentAttempt | Verdict | None:
    """Store the attempt in a savepoint (a new row, or ``earlier`` reopened), undone if
    its host has a token this delivery should try (``shared``: one it sells): the row as
    stored, the hold, or None when a unique key refused it or ``earlier`` changed.

    The token is looked for after the row is written, so that the statement waits for
    (and then sees) another worker's payment committing at once; a reopened attempt
    may meet a unique key (its slot) that refuses it with an error."""
    try:
        with transaction.atomic():
            stored = insert(PaymentAttempt(**fields)) if earlier is None else None
            if earlier is not None and _reopen(earlier, fields):
                stored = earlier
            host, now = fields["host"], fields["created_at"]
            if stored is not None and shared and bought_meanwhile(host, delivery_id, now):
                raise _BoughtMeanwhile
    except _BoughtMeanwhile:
        return Verdict(AttemptResult.HELD, BOUGHT_MEANWHILE, settings.hold_while_paying)
    except IntegrityError:
        return None
    return stored


def _reopen(attempt: PaymentAttempt, fields: dict[str, Any]) -> bool:
    """Make the failed, unpaid ``attempt`` pending again with ``fields`` (this delivery,
    its sender, a new reservation and lifetime), in the database and on ``attempt``;
    False if it is no longer failed unpaid."""
    again = {**fields, "state": PaymentState.PENDING, "reason": "", "preimage": "", "fee_msat": 0}
    if not PaymentAttempt.objects.filter(
        pk=attempt.pk, state=PaymentState.FAILED, paid_at__isnull=True
    ).update(**again):
        return False
    for name, value in again.items():
        setattr(attempt, name, value)
    return True


class _BoughtMeanwhile(Exception):
    """Raised inside the savepoint: the host has a token this delivery should try."""

"""A 402 the ledger cannot simply store: its invoice stored before, or a write refused.

An attempt is stored once per invoice (its payment hash is unique), and a host's
payments under way are bounded by its slots (unique per host and slot while
pending).  When either constraint stands in the way, what is stored decides, never
the database's refusal: an invoice that failed unpaid may be paid again
(:func:`reopenable`, the ledger reopens it); one being paid is waited for; one paid
already buys nothing (:func:`served_again`); a refused write is read again
(:func:`conflict`).  These read, and decide what the delivery does; the writes are
:mod:`~django_outbox.payments.opening`'s.
"""

from __future__ import annotations

from django.utils import timezone

from django_outbox.payments.batches import LedgerBatch, Verdict
from django_outbox.payments.errors import Reason
from django_outbox.payments.lookups import bought_meanwhile
from django_outbox.payments.models import PaymentAttempt, PaymentState
from django_outbox.payments.reports import BOUGHT_MEANWHILE, STORED_MEANWHILE, Challenge
from django_outbox.values.outcomes import AttemptResult


def stored(challenge: Challenge) -> PaymentAttempt | None:
    """The attempt already stored for the challenge's invoice, if any."""
    return PaymentAttempt.objects.filter(payment_hash=challenge.payment_hash).first()


def reopenable(attempt: PaymentAttempt) -> bool:
    """Whether a stored attempt may be paid again: the node said it failed, and it was
    never paid (a route failure, say): paying it again is paying it once."""
    return attempt.state == PaymentState.FAILED and attempt.paid_at is None


def served_again(
    delivery_id: int, host: str, earlier: PaymentAttempt, batch: LedgerBatch
) -> Verdict:
    """What becomes of the delivery of a 402 whose invoice is stored already, and is not
    to be paid again.

    Pending: that invoice is being paid (for another delivery, or host), so it is held
    as any delivery whose host is being paid.  Paid: paying it again buys nothing; the
    delivery is held to try a token its host has (``bought_meanwhile``), or, with none,
    refused (``invoice_already_paid``): a host that serves a paid invoice again will not
    take our payment for this message.
    """
    if earlier.state == PaymentState.PENDING:
        return batch.held_while_paying(host)
    shared = not batch.effects.per_message(host)
    if shared and bought_meanwhile(host, delivery_id, timezone.now()):
        return Verdict(AttemptResult.HELD, BOUGHT_MEANWHILE, batch.settings.hold_while_paying)
    error = (
        f"payment refused: {Reason.INVOICE_ALREADY_PAID.value}: the destination served "
        f"invoice {earlier.payment_hash[:12]} again, paid on "
        f"{(earlier.paid_at or earlier.created_at):%Y-%m-%d %H:%M:%S} UTC"
    )
    return Verdict(AttemptResult.REFUSED, error)


def conflict(delivery_id: int, host: str, challenge: Challenge, batch: LedgerBatch) -> Verdict:
    """What becomes of the delivery of a challenge that a unique constraint refused, as
    what is stored now says: its host's slots all taken (payments under way), or the
    invoice's attempt (:func:`served_again`).  Neither (a slot taken meanwhile by another
    worker, a row changed since): held briefly, to meet the 402 again and look again."""
    batch.slots.pop(host, None)
    if batch.free_slot(host) is None:
        return batch.held_while_paying(host)
    earlier = stored(challenge)
    if earlier is not None and not reopenable(earlier):
        return served_again(delivery_id, host, earlier, batch)
    return Verdict(AttemptResult.HELD, STORED_MEANWHILE, batch.settings.hold_while_paying)

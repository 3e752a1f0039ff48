"""Every change of a payment attempt, and of the daily budgets: nothing else writes them.

::

       402, checked ──► pending ──► paid ──► used (token kept for the host) ──► retired
       (budget reserved,  │   ▲      │
        committed before  │   │      └──► failed (the destination refused the paid token)
        anything is paid) ▼   │ its invoice served again: reopened, reserved again
                        failed (the node says nothing was paid; budget given back)

The recorder calls :func:`record_payments` with each batch of outcomes, in a
transaction of its own that commits before the deliveries' new states: a payment
is a fact about money and is kept even when the delivery's claim was lost.  What a
claim reads of them is in :mod:`~django_outbox.payments.lookups`.  The budget of a
sender's day is one row raised by a conditional ``UPDATE``, so every worker sees one
total and none can overspend it.  A 402 met while another delivery bought the host a
token is held for that token rather than paid again.  An invoice served again (its
payment hash is unique) is paid again only if it failed unpaid; one paid already is
refused (``invoice_already_paid``), one being paid is waited for.  A unique constraint
that refuses a write is never taken at its word: what is stored is read, and decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from django_outbox.outcomes import AttemptResult, Outcome
from django_outbox.payments.claims import hold_for
from django_outbox.payments.errors import Reason
from django_outbox.payments.lookups import bought_meanwhile, day_of, paying_hosts, spent_today
from django_outbox.payments.models import PaymentAttempt, PaymentBudget, PaymentState
from django_outbox.payments.notices import PaymentSignals
from django_outbox.payments.reports import (
    BOUGHT_MEANWHILE,
    PAYING_ELSEWHERE,
    STORED_MEANWHILE,
    Challenge,
    Change,
    Settlement,
)
from django_outbox.payments.settings import MAX_MSAT, PaymentSettings
from django_outbox.store.queries import queued_per_host


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def settle(settlements: Iterable[Settlement]) -> None:
    """Apply ``settlements`` found outside a delivery's attempt (the sweeper's lookups)."""
    signals = PaymentSignals()
    with transaction.atomic():
        for settlement in settlements:
            _settle(settlement, signals)
    signals.send()


def prune(older_than: float) -> int:
    """Delete settled attempts (not pending) created longer ago than ``older_than``
    seconds whose delivery is pruned, and budget days as old; how many attempts."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    old = PaymentAttempt.objects.filter(created_at__lt=cutoff, delivery__isnull=True)
    ids = list(old.exclude(state=PaymentState.PENDING).values_list("id", flat=True)[:5000])
    deleted, _ = PaymentAttempt.objects.filter(id__in=ids).delete()
    PaymentBudget.objects.filter(day__lt=day_of(cutoff)).delete()
    return deleted


# ------------------------------------------------------------------ budget ---


def _reserve(sender: str, day: date, amount: int, budget: int) -> bool:
    """Add ``amount`` to the sender's spending on ``day`` if it stays within ``budget``."""
    new = PaymentBudget(sender=sender, day=day)
    PaymentBudget.objects.bulk_create([new], ignore_conflicts=True)
    return bool(
        PaymentBudget.objects.filter(
            sender=sender, day=day, spent_msat__lte=budget - amount
        ).update(spent_msat=F("spent_msat") + amount)
    )


def _release(sender: str, day: date, amount: int) -> None:
    if amount > 0:
        PaymentBudget.objects.filter(sender=sender, day=day, spent_msat__gte=amount).update(
            spent_msat=F("spent_msat") - amount
        )


# ----------------------------------------------------------------- outcomes ---


def record_payments(outcomes: Sequence[Outcome], settings: PaymentSettings) -> list[Outcome]:
    """Write the payment reports of ``outcomes``; the outcomes as the ledger leaves them.

    A challenge is stored ``pending`` with its budget reserved, and its delivery comes
    back at once to pay it (``paying``); over the day's budget it is held to the next
    day, while another payment to the host is under way it is held briefly, and past
    ``MAX_PAYMENTS_PER_DELIVERY`` it is refused.  Commits before returning.
    """
    if not any(outcome.payment is not None for outcome in outcomes):
        return list(outcomes)
    batch = _Batch(settings)
    with transaction.atomic():
        result = [_record(outcome, batch) for outcome in outcomes]
    batch.signals.send()
    return result


@dataclass
class _Batch:
    """One call of :func:`record_payments`: its signals, the hosts it found paying
    (a pending attempt stored by it, or committed before), and the queue lengths it
    read (to hold deliveries for)."""

    settings: PaymentSettings
    signals: PaymentSignals = field(default_factory=PaymentSignals)
    paying: set[str] = field(default_factory=set)
    queued: dict[str, int] = field(default_factory=dict)

    def is_paying(self, host: str) -> bool:
        """Whether ``host`` has a pending attempt (asked once per batch and host)."""
        if host not in self.paying and paying_hosts([host]):
            self.paying.add(host)
        return host in self.paying

    def held_while_paying(self, outcome: Outcome) -> Outcome:
        """``outcome`` held while another delivery pays its host, as long as a claim
        would hold it (longer the more deliveries wait for that host)."""
        host = outcome.row.host
        if host not in self.queued:
            self.queued[host] = queued_per_host([host]).get(host, 0)
        wait = hold_for(self.settings.hold_while_paying, self.queued[host])
        return replace(outcome, result=AttemptResult.HELD, error=PAYING_ELSEWHERE, held_for=wait)


def _record(outcome: Outcome, batch: _Batch) -> Outcome:
    report = outcome.payment
    if report is None:
        return outcome
    for settlement in report.settlements:
        _settle(settlement, batch.signals)
    if report.challenge is None:
        return outcome
    return _open(outcome, report.challenge, batch)


def _settle(settlement: Settlement, signals: PaymentSignals) -> None:
    """Apply one settlement; each is conditional on the state it leaves, so that a batch
    saved twice (the recorder retries after a database error) changes nothing twice."""
    now = timezone.now()
    rows = PaymentAttempt.objects.filter(id=settlement.attempt_id)
    change = settlement.change
    if change is Change.PAID:
        # A failed attempt that was never paid can still turn out paid (the node knew
        # better); one the destination refused after paying cannot be paid again.
        attempt = rows.filter(
            Q(state=PaymentState.PENDING) | Q(state=PaymentState.FAILED, paid_at__isnull=True)
        ).first()
        if attempt is None:
            return
        # The node's word, bounded to what a payment can cost (and the columns hold).
        fee = min(max(0, settlement.fee_msat), MAX_MSAT)
        rows.filter(state=attempt.state).update(
            state=PaymentState.PAID,
            preimage=settlement.preimage,
            fee_msat=fee,
            paid_at=now,
            reason="",
            reserved_msat=attempt.amount_msat + fee,
        )
        spent, day = attempt.amount_msat + fee, day_of(attempt.created_at)
        if attempt.state == PaymentState.FAILED:  # given back too early: take it again
            budget = PaymentBudget.objects.filter(sender=attempt.sender, day=day)
            budget.update(spent_msat=F("spent_msat") + spent)
        else:
            _release(attempt.sender, day, attempt.reserved_msat - spent)
        signals.made.append(attempt.pk)
    elif change is Change.FAILED:
        attempt = rows.filter(state=PaymentState.PENDING).first()
        if attempt is not None and rows.filter(state=PaymentState.PENDING).update(
            state=PaymentState.FAILED, reason=settlement.reason[:500], reserved_msat=0
        ):
            _release(attempt.sender, day_of(attempt.created_at), attempt.reserved_msat)
            signals.failed.append((attempt.pk, settlement.reason))
    elif change is Change.USED:
        rows.filter(state__in=(PaymentState.PAID, PaymentState.USED)).update(
            state=PaymentState.USED, uses=F("uses") + 1
        )
    elif change is Change.REJECTED:
        if rows.filter(state=PaymentState.PAID).update(
            state=PaymentState.FAILED, reason=settlement.reason[:500]
        ):
            signals.failed.append((settlement.attempt_id, settlement.reason))
    elif change is Change.RETIRED:
        rows.filter(state=PaymentState.USED, retired_at__isnull=True).update(
            retired_at=now, reason=settlement.reason[:500]
        )


def _nextday_of(now: datetime) -> float:
    midnight = datetime.combine(day_of(now) + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return (midnight - now).total_seconds()


def _open(outcome: Outcome, challenge: Challenge, batch: _Batch) -> Outcome:
    """Store ``challenge`` as a pending attempt of the outcome's delivery, within budget.

    A host with a pending attempt already (stored by this batch, or committed) is not
    tried: the unique constraint would refuse it, after a savepoint and an insert.  Its
    delivery is held before anything else is read (the payments it made are counted
    when it meets a 402 with nobody paying).  An invoice stored before (its payment
    hash is unique) is paid again only if it failed unpaid: that attempt is reopened
    for this delivery (:func:`_served_again` says what becomes of the others).
    """
    row, sender, settings = outcome.row, outcome.message.sender, batch.settings
    if batch.is_paying(row.host):
        return batch.held_while_paying(outcome)
    spent = PaymentAttempt.objects.filter(delivery_id=row.id).filter(
        Q(paid_at__isnull=False) | Q(state=PaymentState.PENDING)
    )
    if spent.count() >= settings.max_payments_per_delivery:
        error = (
            f"payment refused: paid {settings.max_payments_per_delivery} times and the "
            f"destination never accepted ({outcome.error})"
        )
        return replace(outcome, result=AttemptResult.REFUSED, error=error)
    earlier = _stored(challenge)
    if earlier is not None and not _reopenable(earlier):
        return _served_again(outcome, earlier, batch)
    now = timezone.now()
    reserve = challenge.amount_msat + settings.max_fee_msat
    fields = {
        "delivery_id": row.id,
        "sender": sender,
        "host": row.host,
        "destination": challenge.destination,
        "scheme": challenge.scheme,
        "invoice": challenge.invoice,
        "macaroon": challenge.macaroon,
        "amount_msat": challenge.amount_msat,
        "pay_amount_msat": challenge.pay_amount_msat,
        "reserved_msat": reserve,
        "created_at": now,
        "invoice_expires_at": _at(challenge.invoice_expires_at),
        "expires_at": now + timedelta(seconds=settings.token_lifetime),
    }
    try:
        with transaction.atomic():
            if earlier is None:
                PaymentAttempt.objects.create(payment_hash=challenge.payment_hash, **fields)
            elif not _reopen(earlier, fields):
                raise _Changed
            if bought_meanwhile(row.host, row.id, now):
                raise _BoughtMeanwhile
            if not _reserve(sender, day_of(now), reserve, settings.daily_budget_msat):
                raise _OverBudget
    except _BoughtMeanwhile:
        wait = settings.hold_while_paying
        return replace(outcome, result=AttemptResult.HELD, error=BOUGHT_MEANWHILE, held_for=wait)
    except _OverBudget:
        batch.signals.over_budget.append(
            {
                "delivery": row.id,
                "actor": sender,
                "day": day_of(now),
                "spent_msat": spent_today(sender),
                "budget_msat": settings.daily_budget_msat,
                "amount_msat": challenge.amount_msat,
            }
        )
        error = f"held: paying {challenge.amount_msat} msat would pass today's budget"
        return replace(outcome, result=AttemptResult.HELD, error=error, held_for=_nextday_of(now))
    except (IntegrityError, _Changed):
        return _conflict(outcome, challenge, batch)
    batch.paying.add(row.host)
    return outcome


def _stored(challenge: Challenge) -> PaymentAttempt | None:
    """The attempt already stored for the challenge's invoice, if any."""
    return PaymentAttempt.objects.filter(payment_hash=challenge.payment_hash).first()


def _reopenable(attempt: PaymentAttempt) -> bool:
    """Whether a stored attempt may be paid again: the node said it failed, and it was
    never paid (a route failure, say): paying it again is paying it once."""
    return attempt.state == PaymentState.FAILED and attempt.paid_at is None


def _reopen(attempt: PaymentAttempt, fields: dict[str, Any]) -> bool:
    """Make the failed, unpaid ``attempt`` pending again with ``fields`` (this delivery,
    its sender, a new reservation and lifetime); False if it is no longer failed unpaid."""
    again = {**fields, "state": PaymentState.PENDING, "reason": "", "preimage": "", "fee_msat": 0}
    return bool(
        PaymentAttempt.objects.filter(
            pk=attempt.pk, state=PaymentState.FAILED, paid_at__isnull=True
        ).update(**again)
    )


def _served_again(outcome: Outcome, earlier: PaymentAttempt, batch: _Batch) -> Outcome:
    """The delivery of a 402 whose invoice is stored already, and is not to be paid again.

    Pending: that invoice is being paid (for another delivery, or host), so it is held
    as any delivery whose host is being paid.  Paid: paying it again buys nothing; the
    delivery is held to try a token its host has (``bought_meanwhile``), or, with none,
    refused (``invoice_already_paid``): a host that serves a paid invoice again will not
    take our payment for this message.
    """
    row = outcome.row
    if earlier.state == PaymentState.PENDING:
        return batch.held_while_paying(outcome)
    if bought_meanwhile(row.host, row.id, timezone.now()):
        wait = batch.settings.hold_while_paying
        return replace(outcome, result=AttemptResult.HELD, error=BOUGHT_MEANWHILE, held_for=wait)
    error = (
        f"payment refused: {Reason.INVOICE_ALREADY_PAID.value}: the destination served "
        f"invoice {earlier.payment_hash[:12]} again, paid on "
        f"{(earlier.paid_at or earlier.created_at):%Y-%m-%d %H:%M:%S} UTC"
    )
    return replace(outcome, result=AttemptResult.REFUSED, error=error)


def _conflict(outcome: Outcome, challenge: Challenge, batch: _Batch) -> Outcome:
    """The delivery of a challenge that a unique constraint refused, as what is stored
    now says: the host's pending attempt (another payment under way), or the invoice's
    attempt (:func:`_served_again`).  Neither (the row changed since): held briefly, to
    meet the 402 again and look again."""
    row = outcome.row
    if paying_hosts([row.host]):
        batch.paying.add(row.host)
        return batch.held_while_paying(outcome)
    earlier = _stored(challenge)
    if earlier is not None and not _reopenable(earlier):
        return _served_again(outcome, earlier, batch)
    wait = batch.settings.hold_while_paying
    return replace(outcome, result=AttemptResult.HELD, error=STORED_MEANWHILE, held_for=wait)


class _Changed(Exception):
    """Raised inside the savepoint: the attempt to reopen changed since it was read."""


class _BoughtMeanwhile(Exception):
    """Raised inside the savepoint: the host has a token this delivery should try."""


class _OverBudget(Exception):
    """Raised inside the savepoint to undo the attempt just written."""


__all__ = [
    "prune",
    "record_payments",
    "settle",
]

"""Every change of a payment attempt (and, through :mod:`~django_outbox.payments.budget`,
of the daily budgets): nothing else writes them but
:mod:`~django_outbox.payments.opening`, which stores new ones.

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

How a host charges is learnt here from what it does with its tokens
(:class:`~django_outbox.payments.models.PaymentHost`): one that answers ``402`` to a
token it accepted once charges per message, and up to ``MAX_PARALLEL_PER_HOST`` of its
deliveries pay at once, each in a slot of its own; one that accepts a token for a
second delivery sells tokens, and is paid one payment at a time (slot 0).  When a
payment ends, the deliveries parked for its host are made due at once
(:func:`record_payments` hands back their ids): all of them once a token-selling host
accepted its token, one per freed slot on a per-message host.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from django_outbox.payments import attempt_statements, budget
from django_outbox.payments.batches import Effects, LedgerBatch, Verdict
from django_outbox.payments.lookups import day_of
from django_outbox.payments.models import (
    PaymentAttempt,
    PaymentBudget,
    PaymentHost,
    PaymentState,
)
from django_outbox.payments.opening import open_attempt
from django_outbox.payments.reports import PARKED_HOLDS, Change, PaymentReport, Settlement
from django_outbox.payments.settings import MAX_MSAT, PaymentSettings
from django_outbox.store.parked import due_now, release_parked
from django_outbox.values.outcomes import Outcome

#: Why the token of a host that charges per message is retired once it opened its delivery.
ONE_DELIVERY = "its host charges per message: a token opens one delivery"


def settle(settlements: Iterable[Settlement]) -> None:
    """Apply ``settlements`` found outside a delivery's attempt (the sweeper's lookups);
    the deliveries parked for their hosts wait for their hold timers."""
    effects = Effects()
    with transaction.atomic():
        _settle_all(settlements, effects)
    effects.signals.send()


def prune(older_than: float) -> int:
    """Delete settled attempts (not pending) created longer ago than ``older_than``
    seconds whose delivery is pruned, and budget days as old; how many attempts."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    old = PaymentAttempt.objects.filter(created_at__lt=cutoff, delivery__isnull=True)
    ids = list(old.exclude(state=PaymentState.PENDING).values_list("id", flat=True)[:5000])
    deleted, _ = PaymentAttempt.objects.filter(id__in=ids).delete()
    PaymentBudget.objects.filter(day__lt=day_of(cutoff)).delete()
    return deleted


# ----------------------------------------------------------------- outcomes ---


@dataclass(frozen=True)
class Recorded:
    """What :func:`record_payments` made of a batch: the outcomes as the ledger leaves
    them, and the deliveries it made due at once (parked for a host whose payment
    ended), to publish ahead of their lanes' backlogs."""

    outcomes: list[Outcome]
    released: list[int] = field(default_factory=list)


def record_payments(outcomes: Sequence[Outcome], settings: PaymentSettings) -> Recorded:
    """Write the payment reports of ``outcomes``.

    A challenge is stored ``pending`` with its budget reserved, and its delivery comes
    back at once to pay it (``paying``); over the day's budget it is held to the next
    day, while its host is being paid as much as it may be it is held briefly, and past
    ``MAX_PAYMENTS_PER_DELIVERY`` it is refused.  Commits, then makes due the
    deliveries parked for the hosts whose payments ended.
    """
    if not any(isinstance(outcome.report, PaymentReport) for outcome in outcomes):
        return Recorded(list(outcomes))
    batch = LedgerBatch(settings)
    senders: set[str] = set()
    for outcome in outcomes:
        if isinstance(outcome.report, PaymentReport):
            senders.add(outcome.message.sender)
            if outcome.report.per_message:  # as its claim (and its store) knew: not read again
                batch.effects.learnt(outcome.row.host, True)
    with transaction.atomic():
        budget.lock_day(senders, day_of(timezone.now()))
        result = [_record(outcome, batch) for outcome in outcomes]
    batch.effects.signals.send()
    return Recorded(result, _released(batch.effects))


def _released(effects: Effects) -> list[int]:
    """Make due the parked deliveries that ``effects`` let go, and hand back their ids
    with those of the deliveries due to hosts just learnt to charge per message."""
    released: list[int] = []
    for host, count in effects.release.items():
        if count is None or count > 0:
            lanes = release_parked(host, PARKED_HOLDS, count)
            released += [pk for ids in lanes.values() for pk in ids]
    for host in effects.hasten:
        released += due_now(host)
    return released


def _record(outcome: Outcome, batch: LedgerBatch) -> Outcome:
    report = outcome.report
    if not isinstance(report, PaymentReport):
        return outcome
    _settle_all(report.settlements, batch.effects, outcome.row.host)
    if report.challenge is None:
        return outcome
    row, sender = outcome.row, outcome.message.sender
    opened = open_attempt(row.id, row.host, sender, report.challenge, batch)
    return opened.applied_to(outcome) if isinstance(opened, Verdict) else outcome


def _settle_all(
    settlements: Iterable[Settlement], effects: Effects, host: str | None = None
) -> None:
    """Apply ``settlements`` in order, each told whether its attempt is used after it
    (``host``: of the delivery that reports them, whose own attempts they pay)."""
    settlements = list(settlements)
    used = {settlement.attempt_id for settlement in settlements if settlement.change is Change.USED}
    for settlement in settlements:
        _settle(settlement, effects, settlement.attempt_id in used, host)


def _settle(
    settlement: Settlement, effects: Effects, then_used: bool = False, host: str | None = None
) -> None:
    """Apply one settlement; each is conditional on the state it leaves, so that a batch
    saved twice (the recorder retries after a database error) changes nothing twice.

    A payment that ends (paid, or failed) frees its host's slot; a token accepted, or
    refused, teaches how its host charges (:func:`_used`, :func:`_retired`).
    ``then_used``: the same report has the attempt's token accepted next; on a host
    that charges per message the payment makes it used (and retired) at once.  ``host``:
    that of the delivery whose attempt made the settlement (None: the sweeper's)."""
    now = timezone.now()
    change = settlement.change
    just_paid = effects.paid.pop(settlement.attempt_id, None)
    if change is Change.PAID:
        # The node's word, bounded to what a payment can cost (and the columns hold).
        fee = min(max(0, settlement.fee_msat), MAX_MSAT)
        made = _made_paid(settlement, (settlement.preimage, fee, now), effects, then_used, host)
        if made is None:
            return
        attempt, left = made
        spent, day = attempt.amount_msat + fee, day_of(attempt.created_at)
        if attempt.state == PaymentState.FAILED:  # given back too early: take it again
            budget.spend(attempt.sender, day, spent)
        else:
            budget.give_back(attempt.sender, day, attempt.reserved_msat - spent)
            if effects.per_message(attempt.host):
                effects.release_some(attempt.host, 1)  # its slot is free
        effects.signals.made.append(attempt.pk)
        if left is not None:
            attempt.state = left
            effects.paid[attempt.pk] = attempt
    elif change is Change.FAILED:
        pending = PaymentAttempt.objects.filter(
            id=settlement.attempt_id, state=PaymentState.PENDING
        )
        failing = pending.first()
        if failing is not None and pending.update(
            state=PaymentState.FAILED, reason=settlement.reason[:500], reserved_msat=0
        ):
            budget.give_back(failing.sender, day_of(failing.created_at), failing.reserved_msat)
            effects.signals.failed.append((failing.pk, settlement.reason))
            effects.release_some(failing.host, 1)  # one of those waiting pays instead
    elif change is Change.USED:
        if just_paid is None or just_paid.state != PaymentState.USED:  # used as it was paid
            _used(settlement.attempt_id, effects, just_paid)
    elif change is Change.REJECTED:
        paid = PaymentAttempt.objects.filter(id=settlement.attempt_id, state=PaymentState.PAID)
        if paid.update(state=PaymentState.FAILED, reason=settlement.reason[:500]):
            effects.signals.failed.append((settlement.attempt_id, settlement.reason))
    elif change is Change.RETIRED:
        _retired(settlement.attempt_id, settlement.reason, effects)


def _made_paid(
    settlement: Settlement,
    paid: tuple[str, int, datetime],
    effects: Effects,
    then_used: bool,
    host: str | None,
) -> tuple[PaymentAttempt, PaymentState | None] | None:
    """Make the settlement's attempt paid (``paid``: its preimage, bounded fee and time):
    the attempt as it was read, and the state this left it in (None: it changed
    nothing); None if it may not turn out paid.  An attempt its payer read pending (most
    payments) is made paid in one statement while it still is; any other is read first.
    A failed attempt that was never paid can still turn out paid (the node knew
    better); one the destination refused after paying cannot be paid again."""

    def opened_one(at: str) -> str:
        return ONE_DELIVERY if then_used and effects.per_message(at) else ""

    if host is not None and settlement.reserved_msat is not None:
        reason = opened_one(host)
        attempt = attempt_statements.mark_paid_as_read(
            settlement.attempt_id, host, settlement.reserved_msat, paid, reason
        )
        if attempt is not None:
            return attempt, _left(reason)
    attempt = attempt_statements.payable(settlement.attempt_id)
    if attempt is None:
        return None
    preimage, fee, now = paid
    spent = attempt.amount_msat + fee
    reason = opened_one(attempt.host)
    changed = attempt_statements.mark_paid(attempt, preimage, fee, now, spent, reason)
    return attempt, _left(reason) if changed else None


def _left(opened_one: str) -> PaymentState:
    """The state a payment leaves its attempt in (``opened_one``: see :func:`_made_paid`)."""
    return PaymentState.USED if opened_one else PaymentState.PAID


def _used(attempt_id: int, effects: Effects, paid: PaymentAttempt | None = None) -> None:
    """A delivery was accepted with the attempt's token.

    Its own delivery: a token was bought.  On a host that charges per message it opens
    nothing more and is retired at once; on any other, the deliveries parked for the
    host are made due to use it (all on a host known to sell tokens, else
    ``MAX_PARALLEL_PER_HOST`` of them, which find out).  Another delivery: the host
    sells tokens (it accepted one twice), and all its parked deliveries go.  ``paid``:
    the attempt as the settlement just before this one left it (paid), not read again.
    """
    attempt = paid or attempt_statements.paid_or_used(attempt_id)
    if attempt is None:
        return
    host, charges = attempt.host, effects.per_message(attempt.host)
    if attempt.state == PaymentState.USED:
        attempt_statements.count_use(attempt_id)
        if charges is not False:
            _learn(host, False, effects)
        effects.release_all(host)
    elif charges:
        attempt_statements.mark_used(attempt_id, (timezone.now(), ONE_DELIVERY))
    else:
        attempt_statements.mark_used(attempt_id)
        if charges is None:
            effects.release_some(host, effects.probe)
        else:
            effects.release_all(host)


def _retired(attempt_id: int, reason: str, effects: Effects) -> None:
    """A host refused the kept token it had accepted: retired.  Refused after opening one
    delivery, it charges per message, and as many deliveries as may pay it at once are
    made due to pay their own."""
    rows = PaymentAttempt.objects.filter(id=attempt_id, state=PaymentState.USED)
    attempt = rows.filter(retired_at__isnull=True).first()
    if attempt is None or not rows.filter(retired_at__isnull=True).update(
        retired_at=timezone.now(), reason=reason[:500]
    ):
        return
    if attempt.uses <= 1 and effects.per_message(attempt.host) is not True:
        _learn(attempt.host, True, effects)
        effects.release_some(attempt.host, effects.probe)
        effects.hasten.add(attempt.host)


def _learn(host: str, per_message: bool, effects: Effects) -> None:
    """Store how ``host`` charges (the newest evidence wins)."""
    PaymentHost.objects.bulk_create(
        [PaymentHost(host=host, per_message=per_message)], ignore_conflicts=True
    )
    PaymentHost.objects.filter(host=host).exclude(per_message=per_message).update(
        per_message=per_message, learnt_at=timezone.now()
    )
    effects.learnt(host, per_message)


__all__ = [
    "prune",
    "record_payments",
    "settle",
]

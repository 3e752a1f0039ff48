"""What the ledger keeps while it records one batch: reads, never writes.

:mod:`~django_outbox.payments.ledger` writes a batch of payment reports in one
transaction.  Deciding each report asks the same questions of many (which slots of a
host's payments are taken, how the host charges, how many deliveries wait for it),
and each answer is read once per batch and host and then kept up to date by the
ledger as it writes.  :class:`Effects` gathers what the batch leads to beyond its
rows: the signals to send and the parked deliveries to make due once it commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django_outbox.payments.hold_times import hold_for
from django_outbox.payments.lookups import host_charges, pending_slots
from django_outbox.payments.models import PaymentAttempt
from django_outbox.payments.notices import PaymentSignals
from django_outbox.payments.reports import PAYING_ELSEWHERE
from django_outbox.payments.settings import PaymentSettings
from django_outbox.store.queries import queued_per_host
from django_outbox.values.outcomes import AttemptResult, Outcome


@dataclass
class Effects:
    """What settlements lead to beyond their rows: the signals to send, how each host
    charges as far as is known (True: per message, False: it sells tokens, None: not
    known yet), and how many of each host's parked deliveries to make due once the
    batch commits (None: all)."""

    signals: PaymentSignals = field(default_factory=PaymentSignals)
    release: dict[str, int | None] = field(default_factory=dict)
    charges: dict[str, bool | None] = field(default_factory=dict)
    #: Deliveries released when a host not known to sell tokens accepts its first one:
    #: what they do with it tells how the host charges (``MAX_PARALLEL_PER_HOST``).
    probe: int = 1
    #: Attempt id -> the attempt as the batch just made it paid, until the attempt's next
    #: settlement (its token used, usually in the same report) takes it: not read again.
    paid: dict[int, PaymentAttempt] = field(default_factory=dict)
    #: Hosts just learnt to charge per message: their deliveries due now go ahead of
    #: their lanes' backlogs, each to pay its own invoice in its attempt.
    hasten: set[str] = field(default_factory=set)

    def per_message(self, host: str) -> bool | None:
        """How ``host`` charges (read once, then as the ledger learns it)."""
        if host not in self.charges:
            self.charges[host] = host_charges(host)
        return self.charges[host]

    def learnt(self, host: str, per_message: bool) -> None:
        """The ledger stored that ``host`` charges per message (or sells tokens)."""
        self.charges[host] = per_message

    def release_all(self, host: str) -> None:
        """Every delivery parked for ``host``: it sells tokens, and one was bought."""
        self.release[host] = None

    def release_some(self, host: str, count: int) -> None:
        """``count`` more of the deliveries parked for ``host``."""
        if host not in self.release or self.release[host] is not None:
            self.release[host] = (self.release.get(host) or 0) + count


@dataclass
class LedgerBatch:
    """One call of :func:`~django_outbox.payments.ledger.record_payments`: its effects,
    the slots of each host's payments under way (committed before, or stored by it), and
    the queue lengths it read (to hold deliveries for)."""

    settings: PaymentSettings
    effects: Effects = field(default_factory=Effects)
    slots: dict[str, set[int]] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.effects.probe = self.settings.max_parallel_per_host

    def taken(self, host: str) -> set[int]:
        """The slots of ``host``'s payments under way (read once per batch and host; the
        ledger adds those it stores)."""
        if host not in self.slots:
            self.slots[host] = pending_slots(host)
        return self.slots[host]

    def free_slot(self, host: str) -> int | None:
        """The slot a new payment to ``host`` takes, or None while it is paid as much as
        it may be: ``MAX_PARALLEL_PER_HOST`` payments at once on a host that charges per
        message, one on any other (a second payment for a token would be waste)."""
        per_message = self.effects.per_message(host)
        width = self.settings.max_parallel_per_host if per_message else 1
        taken = self.taken(host)
        return next((slot for slot in range(width) if slot not in taken), None)

    def held_while_paying(self, host: str) -> Verdict:
        """A hold while ``host`` is paid as much as it may be, as long as a claim would
        hold it (longer the more deliveries wait for that host)."""
        if host not in self.queued:
            self.queued[host] = queued_per_host([host]).get(host, 0)
        wait = hold_for(self.settings.hold_while_paying, self.queued[host])
        return Verdict(AttemptResult.HELD, PAYING_ELSEWHERE, wait)


@dataclass(frozen=True)
class Verdict:
    """What the ledger made of a challenge it did not store: the delivery is held
    (``held_for`` seconds) or refused, with ``error`` on its row."""

    result: AttemptResult
    error: str
    held_for: float | None = None

    def applied_to(self, outcome: Outcome) -> Outcome:
        """``outcome`` (the attempt that met the challenge) ending as this says."""
        return replace(outcome, result=self.result, error=self.error, held_for=self.held_for)

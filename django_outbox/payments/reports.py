"""What a sending thread tells the recorder about payments, and what a claim tells the thread.

The sending loops touch no database, so payments travel as values: a claim loads the
delivery's open attempt and the host's kept token (:class:`OpenAttempt`,
:class:`KeptToken`), the attempt pays (on a payment thread, which also stores a new
attempt on a host that charges per message) and sends, and its
:class:`~django_outbox.values.outcomes.Outcome` carries a :class:`PaymentReport` that
:mod:`django_outbox.payments.ledger` writes.  Secrets (macaroon, preimage) stay out of
every ``repr``; they only cross threads, never processes or the broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from django_outbox.payments.challenge import authorization

#: Why a delivery waits, as its outcome's ``error``: its claim found its host being paid.
PAID_AT_CLAIM = "held: a payment to this host is under way"
#: ... another delivery is paying its host.
PAYING_ELSEWHERE = "held: another payment to this host is under way"
#: ... another delivery of this process met its host's payable 402 a moment ago.
MET_402_LATELY = "held: another delivery met this host's 402 a moment ago"
#: ... a token for its host was bought while it was sent (it tries that token first).
BOUGHT_MEANWHILE = "held: a token for this host was bought while this delivery was sent"
#: ... its invoice's stored attempt changed while its challenge was stored (it meets the
#: 402 again and the ledger looks again).
STORED_MEANWHILE = "held: this invoice's payment record changed while it was stored"
#: The holds that are parked rather than recorded (by the claim, or by the recorder):
#: none is an attempt, and each ends when the payment under way does.
PARKED_HOLDS = frozenset(
    (PAID_AT_CLAIM, PAYING_ELSEWHERE, MET_402_LATELY, BOUGHT_MEANWHILE, STORED_MEANWHILE)
)


@dataclass(frozen=True)
class KeptToken:
    """A token a host accepted before, presented first to that host."""

    attempt_id: int
    host: str
    scheme: str
    macaroon: str = field(repr=False)
    preimage: str = field(repr=False)

    def authorization(self) -> str:
        """The ``Authorization`` value presenting this token."""
        return authorization(self.macaroon, self.preimage, scheme=self.scheme)


@dataclass(frozen=True)
class OpenAttempt:
    """A delivery's stored attempt that is ``pending`` or ``paid`` (not yet accepted).

    Times are Unix seconds.  ``preimage`` is set once paid.
    """

    attempt_id: int
    #: The URL that asked for it: its token is presented there and nowhere else.
    destination: str
    state: str
    scheme: str
    payment_hash: str
    amount_msat: int
    pay_amount_msat: int | None
    invoice_expires_at: float
    expires_at: float
    invoice: str = field(repr=False)
    macaroon: str = field(repr=False)
    preimage: str = field(default="", repr=False)
    #: What the sender's budget holds for it, as read with it: a payment settled for an
    #: attempt read pending says so, and the ledger makes it paid in one statement while
    #: it still is (see :class:`Settlement`).
    reserved_msat: int | None = None

    def authorization(self, preimage: str) -> str:
        """The ``Authorization`` value of this attempt's token with ``preimage``."""
        return authorization(self.macaroon, preimage, scheme=self.scheme)


@dataclass(frozen=True)
class Challenge:
    """A checked ``402`` challenge, to be stored as a pending attempt before anything is paid."""

    destination: str
    scheme: str
    payment_hash: str
    amount_msat: int
    pay_amount_msat: int | None
    invoice_expires_at: float
    invoice: str = field(repr=False)
    macaroon: str = field(repr=False)


class Change(StrEnum):
    """What happened to a stored attempt."""

    PAID = "paid"  # the node confirmed it: preimage and fee known
    FAILED = "failed"  # the node says nothing was paid (or the invoice ran out unpaid)
    USED = "used"  # the destination accepted its token
    REJECTED = "rejected"  # the destination refused the token it had just been paid for
    RETIRED = "retired"  # the destination no longer accepts a kept token


@dataclass(frozen=True)
class Settlement:
    """One change to the stored attempt ``attempt_id``."""

    attempt_id: int
    change: Change
    preimage: str = field(default="", repr=False)
    fee_msat: int = 0
    reason: str = ""
    #: A payment (``PAID``) of an attempt its payer read pending: the reservation it read
    #: (None: not read so, and the ledger reads the attempt before it settles).
    reserved_msat: int | None = None


@dataclass(frozen=True)
class PaymentReport:
    """The payment side of one attempt: ``settlements`` of stored attempts, in order, and
    maybe a new ``challenge`` to store; ``paid_msat`` is what the delivery's own payment
    cost when the attempt delivered with it (``delivery_settled``'s ``amount_msat``)."""

    settlements: tuple[Settlement, ...] = ()
    challenge: Challenge | None = None
    paid_msat: int = 0
    #: The claim knew the delivery's host charges per message, as the attempt's store of
    #: its challenge did: the ledger takes its word rather than read it again.
    per_message: bool = False

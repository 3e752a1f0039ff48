"""The payment record: one row per invoice the sender decided to pay, and the daily budgets.

A :class:`PaymentAttempt` is written (``pending``) and committed *before* the node
is asked to pay, so that a worker that dies at any point leaves a row that the next
attempt resolves by asking the node, never by paying blindly.  Only
:mod:`django_outbox.payments.ledger` changes these rows.  The macaroon and preimage
are bearer secrets: they are stored because the token must outlive the process that
paid, and never shown (``__str__``, ``__repr__`` and the admin show prefixes).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


class PaymentState(models.TextChoices):
    """Where a payment attempt stands.

    ``pending``: stored, the node may or may not have paid.  ``paid``: the node
    confirmed it and the preimage is known.  ``used``: the destination accepted the
    token (it is kept for that host until rejected or expired).  ``failed``: the node
    says nothing was paid, or the destination rejected the paid token (``paid_at``
    tells which).
    """

    PENDING = "pending", "pending"
    PAID = "paid", "paid"
    USED = "used", "used"
    FAILED = "failed", "failed"


class PaymentAttempt(models.Model):
    """One invoice a destination asked to be paid, and what became of it."""

    delivery = models.ForeignKey(
        "django_outbox.Delivery",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="payments",
        # No database constraint, as the history's: the prune unlinks these itself.
        db_constraint=False,
        help_text="The delivery that met the 402 (kept as a record after it is pruned).",
    )
    sender = models.CharField(max_length=2048, help_text="The actor whose budget pays.")
    host = models.CharField(max_length=255, db_index=True)
    destination = models.CharField(max_length=2048, help_text="The URL that answered 402.")
    scheme = models.CharField(max_length=4, default="L402")
    invoice = models.TextField()
    payment_hash = models.CharField(max_length=64, unique=True)
    macaroon = models.TextField(help_text="Secret: the L402 macaroon (base64).")
    preimage = models.CharField(max_length=64, blank=True, help_text="Secret: proof of payment.")
    amount_msat = models.PositiveBigIntegerField(help_text="The price, before routing fees.")
    pay_amount_msat = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Amount given to the node (amountless invoices)."
    )
    reserved_msat = models.PositiveBigIntegerField(
        default=0, help_text="What the attempt holds of the sender's daily budget."
    )
    fee_msat = models.PositiveBigIntegerField(default=0)
    state = models.CharField(
        max_length=8, choices=PaymentState.choices, default=PaymentState.PENDING
    )
    reason = models.CharField(max_length=500, blank=True)
    uses = models.PositiveIntegerField(default=0, help_text="Deliveries the token opened.")
    slot = models.PositiveSmallIntegerField(
        default=0,
        help_text=(
            "Which of its host's payments under way this is: always 0 on a host that sells "
            "tokens, below MAX_PARALLEL_PER_HOST on one that charges per message."
        ),
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    invoice_expires_at = models.DateTimeField()
    expires_at = models.DateTimeField(help_text="End of the attempt's and token's lifetime.")
    paid_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(
        null=True, blank=True, help_text="When the host stopped accepting the token."
    )

    class Meta:
        ordering = ("-id",)
        constraints = [
            # One payment under way per host and slot: a host that sells tokens has one
            # slot (a second delivery meeting a 402 there waits for the token being
            # bought), one that charges per message MAX_PARALLEL_PER_HOST.
            models.UniqueConstraint(
                fields=("host", "slot"),
                condition=Q(state="pending"),
                name="django_outbox_pending_payment_slot",
            ),
            # Never two payments under way for one delivery (one inbox's copy of a message).
            models.UniqueConstraint(
                fields=("delivery",),
                condition=Q(state="pending"),
                name="django_outbox_one_pending_payment_per_delivery",
            ),
        ]
        indexes = [
            models.Index(
                fields=("host", "-paid_at"),
                condition=Q(state="used", retired_at__isnull=True),
                name="django_outbox_kept_tokens",
            ),
            models.Index(
                fields=("delivery", "state"),
                name="django_outbox_payments_of",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.amount_msat} msat to {self.host} ({self.state}, {self.payment_hash[:12]})"

    def __repr__(self) -> str:
        return f"<PaymentAttempt {self.pk}: {self}>"


class PaymentHost(models.Model):
    """What the ledger learnt of how a host charges, from what it did with its tokens.

    A host that answered ``402`` to a token it had accepted once charges per message:
    its deliveries pay their own invoices, several at once.  A host that accepted one
    token for a second delivery sells tokens: one payment at a time, the others wait
    for its token.  A host with no row is taken to sell tokens until it shows otherwise
    (a second payment there would be waste).
    """

    host = models.CharField(max_length=255, unique=True)
    per_message = models.BooleanField(default=False)
    learnt_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.host}: {'per message' if self.per_message else 'sells tokens'}"


class PaymentBudget(models.Model):
    """What a sender has committed to pay (paid, or reserved by pending attempts) on a day
    (UTC).  Raised only by a conditional ``UPDATE`` that keeps it within the budget."""

    sender = models.CharField(max_length=2048)
    day = models.DateField()
    spent_msat = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ("-day", "sender")
        constraints = [
            models.UniqueConstraint(fields=("sender", "day"), name="django_outbox_budget_day"),
        ]

    def __str__(self) -> str:
        return f"{self.sender} on {self.day}: {self.spent_msat} msat"

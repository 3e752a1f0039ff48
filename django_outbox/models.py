"""The durable record: one row per activity or webhook sent, one per inbox it goes to.

The database is the schedule and the source of truth; Celery only carries
delivery ids.  A :class:`Message` holds the exact bytes that are sent, once,
with their digest, so a fan-out to 100,000 inboxes stores the body one time.
A :class:`Delivery` is one inbox's copy of the work, with its state, its
attempts and its lease.
"""

from __future__ import annotations

from django.db import connection, models
from django.db.models import Q
from django.utils import timezone

from django_outbox.values import columns
from django_outbox.values.claimed import Signing


class DeliveryState(models.TextChoices):
    """The closed set of states a delivery can be in.

    ``waiting``, ``queued`` and ``sending`` are live; the rest are final.
    See ``docs/design.md`` for the transitions.
    """

    WAITING = "waiting", "waiting for an earlier delivery"
    QUEUED = "queued", "queued"
    SENDING = "sending", "sending"
    DELIVERED = "delivered", "delivered"
    REFUSED = "refused", "refused"
    SKIPPED = "skipped", "skipped"
    FAILED = "failed", "failed"


LIVE_STATES = (DeliveryState.WAITING, DeliveryState.QUEUED, DeliveryState.SENDING)
SETTLED_STATES = (DeliveryState.DELIVERED, DeliveryState.REFUSED, DeliveryState.SKIPPED)
FINAL_STATES = (*SETTLED_STATES, DeliveryState.FAILED)


def locked(queryset: models.QuerySet[Delivery]) -> models.QuerySet[Delivery]:
    """``queryset`` locked for this transaction, skipping rows another one holds.

    SQLite has no row locks; there the conditional updates alone keep it right.
    """
    if connection.features.has_select_for_update_skip_locked:
        return queryset.select_for_update(skip_locked=True, of=("self",))
    return queryset


class Lane(models.TextChoices):
    """The Celery queues deliveries travel in; the value is the queue name."""

    PRIORITY = "outbox.priority", "priority"
    DEFAULT = "outbox", "default"
    LOW = "outbox.low", "low"


class Message(models.Model):
    """One activity or webhook as it is sent: its bytes, its sender and its batch options."""

    sender = models.CharField(
        max_length=columns.URL,
        help_text="The actor id (or webhook sender) the body is signed as.",
    )
    signing = models.CharField(
        max_length=20, choices=Signing.choices, default=Signing.HTTP_SIGNATURES
    )
    webhook_id = models.CharField(
        max_length=255,
        blank=True,
        db_index=True,
        help_text="The webhook-id header every attempt of every endpoint carries (webhooks).",
    )
    body = models.BinaryField(help_text="The exact bytes POSTed to every inbox or endpoint.")
    body_sha256 = models.BinaryField(max_length=32, help_text="SHA-256 of body, computed once.")
    content_type = models.CharField(
        max_length=columns.CONTENT_TYPE, default="application/activity+json"
    )
    activity_type = models.CharField(
        max_length=columns.ACTIVITY_TYPE,
        blank=True,
        help_text="The activity's or webhook payload's type.",
    )
    tag = models.CharField(max_length=columns.TAG, blank=True, db_index=True)
    deadline = models.DateTimeField(null=True, blank=True)
    ordering_key = models.CharField(max_length=columns.ORDERING_KEY, blank=True)
    lane = models.CharField(max_length=20, choices=Lane.choices, default=Lane.DEFAULT)
    synchronize_collection = models.BooleanField(default=False)
    max_attempts = models.PositiveSmallIntegerField(help_text="Attempts each delivery may spend.")
    inbox_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ("-id",)
        constraints = [
            # A caller-given webhook id is sent once per sender (outbox.send_webhook).
            models.UniqueConstraint(
                fields=("sender", "webhook_id"),
                condition=~Q(webhook_id=""),
                name="django_outbox_webhook_once_per_sender",
            ),
        ]

    def __str__(self) -> str:
        label = self.activity_type or (
            "webhook" if self.signing == Signing.STANDARD_WEBHOOKS else "message"
        )
        return f"{label} #{self.pk} from {self.sender}"


class PendingInboxes(models.Model):
    """A slice of a large fan-out's inboxes, not yet written as deliveries.

    ``send`` stores the inboxes of a fan-out above ``OUTBOX_INLINE_FANOUT`` in
    slices (one URL a line, a few thousand a slice), so that no row grows with the
    size of the fan-out; a worker turns each slice into deliveries and deletes it in
    one transaction (:func:`django_outbox.sending.fanout.expand`).
    """

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="pending")
    seq = models.PositiveIntegerField(help_text="Slices are expanded in this order.")
    inboxes = models.TextField(help_text="Inbox URLs, one per line.")

    class Meta:
        verbose_name_plural = "pending inboxes"
        ordering = ("message", "seq")
        constraints = [
            models.UniqueConstraint(fields=("message", "seq"), name="django_outbox_pending_slice"),
        ]

    def __str__(self) -> str:
        return f"slice {self.seq} of message #{self.message_id}"


class Delivery(models.Model):
    """One inbox's copy of a message, and everything known about sending it."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="deliveries")
    inbox = models.CharField(max_length=columns.URL)
    host = models.CharField(max_length=columns.HOST, db_index=True)
    via = models.JSONField(
        default=list, blank=True, help_text="Gateways to try in order (portable inboxes)."
    )
    state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.QUEUED
    )
    lane = models.CharField(max_length=20, choices=Lane.choices, default=Lane.DEFAULT)
    ordering_key = models.CharField(max_length=columns.ORDERING_KEY, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="When a Celery message carrying it was last published."
    )
    claimed_by = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    deadline_reached = models.BooleanField(default=False)
    failed_signal_pending = models.BooleanField(
        default=False,
        help_text="Given up on, and its delivery_failed signal not yet known to be sent.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ("-id",)
        constraints = [
            models.UniqueConstraint(
                fields=("message", "inbox"), name="django_outbox_delivery_once_per_inbox"
            ),
        ]
        indexes = [
            models.Index(
                fields=("lane", "next_attempt_at"),
                condition=Q(state="queued"),
                name="django_outbox_due",
            ),
            models.Index(
                fields=("lease_until",),
                condition=Q(state="sending"),
                name="django_outbox_leased",
            ),
            models.Index(
                fields=("ordering_key", "inbox", "id"),
                condition=Q(state__in=("waiting", "queued", "sending")) & ~Q(ordering_key=""),
                name="django_outbox_ordered_live",
            ),
            # With the state, the status counts finished deliveries from the index alone.
            models.Index(fields=("finished_at", "state"), name="django_outbox_finished"),
            models.Index(fields=("state", "id"), name="django_outbox_state"),
            models.Index(
                fields=("finished_at",),
                condition=Q(failed_signal_pending=True),
                name="django_outbox_failed_signal",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.inbox} ({self.state})"


class Host(models.Model):
    """A destination host that has been failing, and since when.

    A row exists only while the host fails: the first success deletes it.  A
    host that failed on ``OUTBOX_UNAVAILABLE_AFTER_DAYS`` distinct days with
    no success in between is unavailable, and deliveries to it are skipped
    (see ``OUTBOX_SKIP_UNAVAILABLE``).
    """

    name = models.CharField(max_length=columns.HOST, unique=True)
    failure_days = models.PositiveSmallIntegerField(default=1)
    first_failure_at = models.DateTimeField(default=timezone.now)
    last_failure_day = models.DateField()
    unavailable_since = models.DateTimeField(null=True, blank=True, db_index=True)
    last_status = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The status of its latest failure; empty: no answer."
    )
    last_error = models.TextField(blank=True, default="", help_text="Its latest failure.")

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class HostPause(models.Model):
    """A host an operator paused: deliveries to it are held, not sent, until it is
    resumed or ``until`` passes (see :mod:`django_outbox.upkeep.pauses`)."""

    name = models.CharField(max_length=columns.HOST, unique=True)
    reason = models.CharField(max_length=500, blank=True, default="")
    paused_at = models.DateTimeField(default=timezone.now)
    until = models.DateTimeField(
        null=True, blank=True, help_text="When it resumes by itself; empty: when resumed."
    )

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Endpoint(models.Model):
    """A webhook endpoint that has been failing, and since when: a :class:`Host` per URL.

    A row exists only while the endpoint fails: a success deletes it.  An endpoint
    that failed on ``OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS`` distinct days with no
    success in between is disabled, and deliveries to it are skipped until
    ``outbox.enable_endpoint`` (or the admin action) deletes its row.  Only the
    endpoint's own failures count: no answer, or a 5xx (see
    :mod:`django_outbox.destinations.endpoint_health`).
    """

    url = models.CharField(max_length=columns.URL, unique=True)
    failure_days = models.PositiveSmallIntegerField(default=1)
    first_failure_at = models.DateTimeField(default=timezone.now)
    last_failure_day = models.DateField()
    last_status = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The status of its latest failure; empty: no answer."
    )
    last_error = models.TextField(blank=True, help_text="Its latest failure.")
    disabled_since = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ("url",)

    def __str__(self) -> str:
        return self.url


class Heartbeat(models.Model):
    """A worker process that is alive, as long as it keeps ``beat_at`` fresh.

    Each process that runs an engine writes its row every
    ``OUTBOX_HEARTBEAT_INTERVAL`` seconds and deletes it when it stops cleanly.
    Its claims name it (``Delivery.claimed_by`` starts with ``name``), so that
    the claims of a process whose row went stale are taken back at once, and
    those of a live one are left alone however long its requests take.
    """

    name = models.CharField(max_length=80, unique=True, help_text="host:pid:random token")
    started_at = models.DateTimeField(default=timezone.now)
    beat_at = models.DateTimeField(help_text="The database's clock at the last beat.")
    leader = models.BooleanField(
        default=False, help_text="Whether it ran the recovery passes at its last beat."
    )
    can_lead = models.BooleanField(
        default=True, help_text="False while its recovery pass is stuck: another leads."
    )
    parts = models.JSONField(
        default=dict, blank=True, help_text="Its supervised parts at the last beat."
    )
    backlog = models.PositiveIntegerField(
        default=0, help_text="Outcomes its recorder had not saved yet at the last beat."
    )

    class Meta:
        ordering = ("id",)

    def __str__(self) -> str:
        return self.name


class Attempt(models.Model):
    """One failed, held or late-succeeding attempt at a delivery: its bounded history.

    A first attempt that succeeds leaves no row.  There is at most one row per
    attempt number and one for the holds before it (``times`` counts those), so
    a delivery keeps at most two rows per attempt it may spend, and its rows go
    with it when it is pruned.  ``host`` is the delivery's, for per-host queries.
    """

    # The unique constraint's index (delivery, number, held) serves lookups by delivery.
    # No database constraint: PostgreSQL would check, for each delivery deleted, that no
    # row points at it (three quarters of a prune's time, at 10 million deliveries); the
    # prune deletes a delivery's history with it, as Django's collector does.
    delivery = models.ForeignKey(
        Delivery,
        on_delete=models.CASCADE,
        related_name="history",
        db_index=False,
        db_constraint=False,
    )
    number = models.PositiveSmallIntegerField(help_text="The attempt's number (1 is the first).")
    held = models.BooleanField(
        default=False, help_text="Held before that attempt: no request was made."
    )
    times = models.PositiveIntegerField(default=1, help_text="Holds this row stands for.")
    host = models.CharField(max_length=255)
    at = models.DateTimeField(help_text="When the attempt started, or the last hold.")
    duration = models.FloatField(null=True, blank=True, help_text="Seconds its requests took.")
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    scheme = models.CharField(max_length=20, blank=True, help_text="Signature scheme last used.")
    result = models.CharField(max_length=10)
    error = models.CharField(max_length=500, blank=True)
    wait = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds asked to wait: the server's Retry-After, or the open breaker's hold.",
    )

    class Meta:
        ordering = ("-at",)
        constraints = [
            models.UniqueConstraint(
                fields=("delivery", "number", "held"), name="django_outbox_attempt_once"
            ),
        ]
        indexes = [
            models.Index(fields=("at",), name="django_outbox_attempt_at"),
            models.Index(fields=("host", "at"), name="django_outbox_attempt_host"),
        ]

    def __str__(self) -> str:
        what = f"held x{self.times}" if self.held else (self.status or self.result)
        return f"attempt {self.number} of delivery {self.delivery_id}: {what}"


__all__ = [
    "FINAL_STATES",
    "LIVE_STATES",
    "SETTLED_STATES",
    "Attempt",
    "Delivery",
    "DeliveryState",
    "Endpoint",
    "Heartbeat",
    "Host",
    "Lane",
    "Message",
    "Signing",
    "locked",
]

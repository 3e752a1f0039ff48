"""The payments admin: every attempt, totals per day and per host, and a retry action.

Secrets never reach the page: the macaroon and the preimage are shown as their first
characters only, and the invoice (public, but long) likewise.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

from django_outbox.admin_readonly import ReadOnlyAdmin
from django_outbox.api import outbox
from django_outbox.models import Delivery
from django_outbox.payments.models import PaymentAttempt, PaymentState

#: Days shown in the totals per day.
TOTAL_DAYS = 14
#: Hosts shown in the totals per host, the dearest first.
TOTAL_HOSTS = 20


def prefix(secret: str, keep: int = 8) -> str:
    """The first ``keep`` characters of ``secret`` and an ellipsis (nothing if empty)."""
    return f"{secret[:keep]}…" if secret else ""


def totals(queryset: QuerySet[PaymentAttempt]) -> dict[str, list[dict[str, Any]]]:
    """What was paid (amount and fees, attempts with ``paid_at``) per day and per host."""
    paid = queryset.filter(paid_at__isnull=False).order_by()
    since = timezone.now() - timedelta(days=TOTAL_DAYS)
    days = (
        paid.filter(paid_at__gte=since)
        .annotate(day=TruncDate("paid_at"))
        .values("day")
        .annotate(payments=Count("id"), amount=Sum("amount_msat"), fees=Sum("fee_msat"))
        .order_by("-day")
    )
    hosts = (
        paid.values("host")
        .annotate(payments=Count("id"), amount=Sum("amount_msat"), fees=Sum("fee_msat"))
        .order_by("-amount")[:TOTAL_HOSTS]
    )
    return {"days": [dict(row) for row in days], "hosts": [dict(row) for row in hosts]}


class PaymentAttemptAdmin(ReadOnlyAdmin):
    """Every payment attempt: what, to whom, for which delivery, and what became of it."""

    list_display = (
        "id",
        "host",
        "amount_msat",
        "fee_msat",
        "state",
        "age",
        "delivery_link",
        "hash_prefix",
        "uses",
        "short_reason",
    )
    list_filter = ("state", "host")
    search_fields = ("host", "destination", "payment_hash", "sender")
    actions = ("retry",)
    show_full_result_count = False
    fields = (
        "delivery_link",
        "sender",
        "host",
        "destination",
        "state",
        "reason",
        "amount_msat",
        "pay_amount_msat",
        "fee_msat",
        "reserved_msat",
        "hash_prefix",
        "invoice_prefix",
        "macaroon_prefix",
        "preimage_prefix",
        "uses",
        "created_at",
        "paid_at",
        "invoice_expires_at",
        "expires_at",
        "retired_at",
    )
    readonly_fields = fields
    change_list_template = "admin/django_outbox/paymentattempt/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[PaymentAttempt]:
        return super().get_queryset(request).defer("invoice", "macaroon", "preimage")

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: PaymentAttempt) -> str:
        return timesince(obj.created_at)

    @admin.display(description="delivery")
    def delivery_link(self, obj: PaymentAttempt) -> str:
        if obj.delivery_id is None:
            return "(pruned)"
        url = reverse("admin:django_outbox_delivery_change", args=[obj.delivery_id])
        return format_html('<a href="{}">#{}</a>', url, obj.delivery_id)

    @admin.display(description="payment hash")
    def hash_prefix(self, obj: PaymentAttempt) -> str:
        return prefix(obj.payment_hash, 16)

    @admin.display(description="invoice")
    def invoice_prefix(self, obj: PaymentAttempt) -> str:
        return prefix(obj.invoice, 24)

    @admin.display(description="macaroon (secret)")
    def macaroon_prefix(self, obj: PaymentAttempt) -> str:
        return prefix(obj.macaroon)

    @admin.display(description="preimage (secret)")
    def preimage_prefix(self, obj: PaymentAttempt) -> str:
        return prefix(obj.preimage, 6)

    @admin.display(description="reason")
    def short_reason(self, obj: PaymentAttempt) -> str:
        return obj.reason[:80]

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Retrying needs the permission to change deliveries."""
        return bool(request.user.has_perm("django_outbox.change_delivery"))

    @admin.action(
        description="Retry the deliveries of the selected failed payments", permissions=["manage"]
    )
    def retry(self, request: HttpRequest, queryset: QuerySet[PaymentAttempt]) -> None:
        """Requeue the finished deliveries of failed attempts: each meets its destination
        again, and pays a new invoice if it is asked to (within the caps and budget)."""
        failed = queryset.filter(state=PaymentState.FAILED, delivery__isnull=False)
        ids = failed.values_list("delivery_id", flat=True)
        count = outbox.requeue(Delivery.objects.filter(id__in=list(ids)))
        self.message_user(
            request,
            f"Requeued {count} deliveries (those still live are already being retried).",
            messages.SUCCESS,
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "totals": totals(PaymentAttempt.objects.all())}
        return super().changelist_view(request, context)

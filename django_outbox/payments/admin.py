"""The payments admin: every attempt, totals per day and per host, today's budgets, and
a retry action that asks first.

Secrets never reach the page: the macaroon and the preimage are shown as their first
characters only, and the invoice (public, but long) likewise.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from django_outbox.admin.confirm import REQUEUE, action_fields, confirm_or_act
from django_outbox.admin.filters import DeliveryFilter, HostFilter
from django_outbox.admin.formatting import age_with_tooltip, msat, shown
from django_outbox.admin.readonly import ReadOnlyAdmin, ReadOnlyInline
from django_outbox.conf import conf
from django_outbox.models import Delivery
from django_outbox.payments.lookups import day_of
from django_outbox.payments.models import PaymentAttempt, PaymentBudget, PaymentState

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


def budgets_today(limit: int = TOTAL_HOSTS) -> list[dict[str, Any]]:
    """Each sender's budget today (the UTC day): committed, and what is left of
    ``OUTBOX_PAYMENTS['DAILY_BUDGET_MSAT']`` (the senders that committed most first)."""
    settings = conf.PAYMENTS
    budget = settings.daily_budget_msat if settings else 0
    rows = PaymentBudget.objects.filter(day=day_of(timezone.now())).order_by("-spent_msat")
    return [
        {
            "sender": row.sender,
            "spent": row.spent_msat,
            "budget": budget,
            "left": max(0, budget - row.spent_msat),
            "share": round(100 * row.spent_msat / budget, 1) if budget else 0,
        }
        for row in rows[:limit]
    ]


class PaymentInline(ReadOnlyInline):
    """The payments a delivery's 402 answers asked for."""

    model = PaymentAttempt
    fields = readonly_fields = ("payment", "state", "amount", "fee", "created", "reason")
    ordering = ("-id",)
    verbose_name_plural = "payments (402 answers paid for)"

    @admin.display(description="payment")
    def payment(self, obj: PaymentAttempt) -> str:
        url = reverse("admin:django_outbox_paymentattempt_change", args=[obj.pk])
        return format_html('<a href="{}">#{}</a>', url, obj.pk)

    amount = shown("amount_msat", "amount", msat)
    fee = shown("fee_msat", "fee", msat)
    created = shown("created_at", "created")


class PaymentAttemptAdmin(ReadOnlyAdmin):
    """Every payment attempt: what, to whom, for which delivery, and what became of it."""

    list_display = (
        "id",
        "host",
        "amount",
        "fee",
        "state",
        "age",
        "delivery_link",
        "hash_prefix",
        "uses",
        "short_reason",
    )
    list_filter = ("state", HostFilter, DeliveryFilter)
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
        "amount",
        "pay_amount",
        "fee",
        "reserved",
        "hash_prefix",
        "invoice_prefix",
        "macaroon_prefix",
        "preimage_prefix",
        "uses",
        "created",
        "paid",
        "invoice_expires",
        "expires",
        "retired",
    )
    readonly_fields = fields
    change_list_template = "admin/django_outbox/paymentattempt/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[PaymentAttempt]:
        return super().get_queryset(request).defer("invoice", "macaroon", "preimage")

    age = shown("created_at", "age", age_with_tooltip, ordering="created_at")
    amount = shown("amount_msat", "amount", msat, ordering="amount_msat")
    pay_amount = shown("pay_amount_msat", "amount given to the node", msat)
    fee = shown("fee_msat", "fee", msat, ordering="fee_msat")
    reserved = shown("reserved_msat", "reserved of the budget", msat)
    created = shown("created_at", "created")
    paid = shown("paid_at", "paid")
    invoice_expires = shown("invoice_expires_at", "invoice expires")
    expires = shown("expires_at", "token expires")
    retired = shown("retired_at", "retired")

    @admin.display(description="delivery")
    def delivery_link(self, obj: PaymentAttempt) -> str:
        if obj.delivery_id is None:
            return "(pruned)"
        url = reverse("admin:django_outbox_delivery_change", args=[obj.delivery_id])
        host = reverse("admin:django_outbox_host_page", args=[obj.host])
        return format_html(
            '<a href="{}">#{}</a> (<a href="{}">{}</a>)', url, obj.delivery_id, host, obj.host
        )

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
        description="Retry the deliveries of the selected failed payments…",
        permissions=["manage"],
    )
    def retry(
        self, request: HttpRequest, queryset: QuerySet[PaymentAttempt]
    ) -> HttpResponse | None:
        """Requeue the finished deliveries of failed attempts, after a confirmation page:
        each meets its destination again, and pays a new invoice if it is asked to (within
        the caps and budget).  Those still live are already being retried."""
        failed = queryset.filter(state=PaymentState.FAILED, delivery__isnull=False)
        ids = list(failed.values_list("delivery_id", flat=True))
        return confirm_or_act(
            request,
            self.admin_site.each_context(request),
            REQUEUE,
            Delivery.objects.filter(id__in=ids),
            described=f"the deliveries of the {len(ids):,} failed payments selected",
            hidden=action_fields(request),
            back=request.get_full_path(),
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            **(extra_context or {}),
            "totals": totals(PaymentAttempt.objects.all()),
            "budgets": budgets_today(),
        }
        return super().changelist_view(request, context)

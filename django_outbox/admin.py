"""Read-only admin pages: deliveries, messages, failing hosts, open breakers and payments.

Nothing can be edited by hand; the actions call the package's own
:meth:`~django_outbox.api.Outbox.requeue` and :meth:`~django_outbox.api.Outbox.give_up`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html

from django_outbox.admin_readonly import ReadOnlyAdmin
from django_outbox.api import outbox
from django_outbox.breakers import BreakerStoreUnavailable
from django_outbox.breakers.configured import configured_store
from django_outbox.hosts import forget_cached
from django_outbox.models import Attempt, Delivery, DeliveryState, Host, Message, PaymentAttempt
from django_outbox.overview import overview_context
from django_outbox.payments.admin import PaymentAttemptAdmin


class AttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    """A delivery's failed and held attempts, newest first."""

    model = Attempt
    fields = readonly_fields = (
        *("at", "number", "result", "status", "duration"),
        *("scheme", "wait", "held", "times", "error"),
    )
    extra = 0
    can_delete = False
    ordering = ("-at",)
    verbose_name_plural = "attempt history (failed and held attempts)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """Every delivery, filterable by state, lane, signing (ActivityPub or webhook) and batch tag."""

    list_display = (
        "id",
        "inbox",
        "state",
        "lane",
        "attempts",
        "last_status",
        "short_error",
        "next_attempt_at",
        "batch_tag",
    )
    list_filter = ("state", "lane", "message__signing", "deadline_reached", "message__tag")
    search_fields = ("inbox", "host", "message__tag", "last_error", "=message__webhook_id")
    list_select_related = ("message",)
    actions = ("requeue", "give_up")
    show_full_result_count = False
    inlines = (AttemptInline,)

    @admin.display(description="batch tag", ordering="message__tag")
    def batch_tag(self, obj: Delivery) -> str:
        return obj.message.tag

    @admin.display(description="last error")
    def short_error(self, obj: Delivery) -> str:
        return obj.last_error[:80]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).defer("message__body")

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Requeueing and giving up need the permission to change deliveries."""
        return bool(request.user.has_perm("django_outbox.change_delivery"))

    @admin.action(description="Requeue the selected deliveries", permissions=["manage"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        count = outbox.requeue(queryset)
        self.message_user(request, f"Requeued {count} deliveries.", messages.SUCCESS)

    @admin.action(description="Give up on the selected deliveries", permissions=["manage"])
    def give_up(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        count = outbox.give_up(queryset, reason=f"given up by {request.user} in the admin")
        self.message_user(request, f"Gave up on {count} deliveries.", messages.SUCCESS)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.overview_view)
        return [path("overview/", view, name="django_outbox_overview"), *super().get_urls()]

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        """Queue depth and age, throughput and failures, failing hosts, batches under way."""
        context = {**self.admin_site.each_context(request), **overview_context(request)}
        context["title"] = "Outbox overview"
        return TemplateResponse(request, "admin/django_outbox/overview.html", context)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    """Each activity or webhook sent, with its batch's progress.

    A webhook is found by the ``webhook-id`` its receiver reports (exact match).
    """

    list_display = (
        "id",
        "activity_type",
        "signing",
        "sender",
        "tag",
        "lane",
        "inbox_count",
        "progress",
    )
    list_filter = ("signing", "lane", "activity_type")
    search_fields = ("sender", "tag", "=webhook_id")
    exclude = ("body",)
    readonly_fields = ("body_text",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        live = Q(
            deliveries__state__in=(
                DeliveryState.QUEUED,
                DeliveryState.SENDING,
                DeliveryState.WAITING,
            )
        )
        queryset: QuerySet[Message] = (
            super()
            .get_queryset(request)
            .defer("body")
            .annotate(
                live=Count("deliveries", filter=live),
                delivered=Count("deliveries", filter=Q(deliveries__state=DeliveryState.DELIVERED)),
                failed=Count("deliveries", filter=Q(deliveries__state=DeliveryState.FAILED)),
            )
        )
        return queryset

    @admin.display(description="progress")
    def progress(self, obj: Any) -> str:
        total = max(1, obj.delivered + obj.failed + obj.live, obj.inbox_count)
        return format_html(
            '<div title="{} delivered, {} failed, {} in progress" style="display:flex;'
            'width:160px;height:10px;background:#eee">'
            '<span style="width:{}%;background:#417690"></span>'
            '<span style="width:{}%;background:#ba2121"></span></div>'
            "<small>{} delivered, {} failed, {} in progress</small>",
            obj.delivered,
            obj.failed,
            obj.live,
            round(100 * obj.delivered / total, 1),
            round(100 * obj.failed / total, 1),
            obj.delivered,
            obj.failed,
            obj.live,
        )

    @admin.display(description="body")
    def body_text(self, obj: Message) -> str:
        return bytes(obj.body).decode(errors="replace")


@admin.register(Host)
class HostAdmin(ReadOnlyAdmin):
    """Hosts that have been failing; also links to the open circuit breakers."""

    list_display = ("name", "failure_days", "first_failure_at", "unavailable_since")
    list_filter = (("unavailable_since", admin.EmptyFieldListFilter),)
    search_fields = ("name",)
    actions = ("mark_available",)

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Resetting hosts and breakers needs the permission to change hosts."""
        return bool(request.user.has_perm("django_outbox.change_host"))

    @admin.action(description="Mark the selected hosts available again", permissions=["manage"])
    def mark_available(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        count, _ = queryset.delete()
        forget_cached()
        self.message_user(request, f"{count} hosts are available again.", messages.SUCCESS)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.breakers_view)
        return [path("breakers/", view, name="django_outbox_breakers"), *super().get_urls()]

    def breakers_view(self, request: HttpRequest) -> HttpResponse:
        """List open and half-open breakers; POST resets the selected ones.

        Breaker keys name destinations (and, scoped per inbox, inbox URLs), so the
        page needs the permission to view hosts, and resetting the one to change them.
        """
        if not self.has_view_permission(request):
            raise PermissionDenied
        can_reset = self.has_manage_permission(request)
        if request.method == "POST" and not can_reset:
            raise PermissionDenied
        store = configured_store()
        error = ""
        try:
            if request.method == "POST":
                for key in request.POST.getlist("key"):
                    store.reset(key)
            states = store.states()
        except BreakerStoreUnavailable as failure:
            states, error = [], str(failure)
        context = {
            **self.admin_site.each_context(request),
            "states": states,
            "error": error,
            "can_reset": can_reset,
        }
        return TemplateResponse(request, "admin/django_outbox/breakers.html", context)


admin.site.register(PaymentAttempt, PaymentAttemptAdmin)

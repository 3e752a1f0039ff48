"""The deliveries' admin: a list that fits a laptop's screen, a page per delivery with
its attempt history and what extensions add, requeue and give-up that ask first, and the overview.

Nothing is edited by hand: every change goes through :mod:`django_outbox.upkeep.bulk`
(the package's :func:`~django_outbox.upkeep.operations.requeue` and
:func:`~django_outbox.upkeep.operations.give_up`), after a confirmation page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.contrib import admin
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_outbox.admin.confirm import (
    GIVE_UP,
    REQUEUE,
    Change,
    action_fields,
    change_paths,
    confirm_or_act,
)
from django_outbox.admin.filters import (
    DueFilter,
    HostFilter,
    MessageFilter,
    StateFilter,
    TagFilter,
)
from django_outbox.admin.formatting import (
    NONE,
    age_with_tooltip,
    moment_with_age,
    relative,
    shown,
)
from django_outbox.admin.overview import overview_context
from django_outbox.admin.readonly import ReadOnlyAdmin, ReadOnlyInline
from django_outbox.extensions.registry import active
from django_outbox.models import LIVE_STATES, Attempt, Delivery
from django_outbox.status.text import seconds


def host_page(host: str) -> str:
    """The URL of ``host``'s page."""
    return reverse("admin:django_outbox_host_page", args=[host])


def clip(text: str, title: str | None = None) -> SafeString:
    """``text`` cut to its cell's width by the list's style, whole in the tooltip."""
    return format_html('<span class="outbox-clip" title="{}">{}</span>', title or text, text)


class AttemptInline(ReadOnlyInline):
    """A delivery's failed and held attempts, newest first, times local with seconds."""

    model = Attempt
    fields = readonly_fields = (
        *("started", "number", "result", "status", "took"),
        *("scheme", "waited", "held", "times", "error"),
    )
    ordering = ("-at",)
    verbose_name_plural = "attempt history (failed and held attempts)"

    started = shown("at", "at")
    took = shown("duration", "took", seconds)
    waited = shown("wait", "wait asked", seconds)


class DeliveryAdmin(ReadOnlyAdmin):
    """Every delivery: sortable by what an operator sorts by, filtered visibly."""

    list_display = (
        *("id", "inbox_cell", "state_cell", "attempts", "status", "error_cell"),
        *("next_attempt", "created", "finished", "tag_cell"),
    )
    list_filter = (
        StateFilter,
        DueFilter,
        HostFilter,
        TagFilter,
        MessageFilter,
        "lane",
        "message__signing",
        "deadline_reached",
    )
    search_fields = ("inbox", "host", "message__tag", "last_error", "=message__webhook_id")
    list_select_related = ("message",)
    actions = ("requeue", "give_up")
    show_full_result_count = False
    fields = readonly_fields = (
        *("message_link", "inbox", "host_link", "state", "lane", "attempts_of"),
        *("next_attempt_shown", "last_status", "last_error", "deadline_reached"),
        *("created_shown", "finished_shown", "dispatched_shown", "claimed_by", "lease_shown"),
        *("ordering_key", "via"),
    )
    change_form_template = "admin/django_outbox/delivery/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).defer("message__body")

    @admin.display(description="inbox", ordering="host")
    def inbox_cell(self, obj: Delivery) -> SafeString:
        return format_html(
            '<a href="{}" class="outbox-host">{}</a>{}', host_page(obj.host), obj.host,
            clip(inbox_path(obj.inbox) or obj.inbox, obj.inbox),
        )  # fmt: skip

    @admin.display(description="state", ordering="state")
    def state_cell(self, obj: Delivery) -> str:
        return obj.state  # the value: the label of "waiting" is a sentence

    @admin.display(description="status", ordering="last_status")
    def status(self, obj: Delivery) -> str:
        return "-" if obj.last_status is None else str(obj.last_status)

    @admin.display(description="last error")
    def error_cell(self, obj: Delivery) -> SafeString:
        return clip(obj.last_error[:500]) if obj.last_error else NONE

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, obj: Delivery) -> str:
        if obj.state not in LIVE_STATES:
            return "-"
        when = relative(obj.next_attempt_at)
        return when if when.startswith("in ") else f"due {when}"

    created = shown("created_at", "created", age_with_tooltip, ordering="created_at")
    finished = shown("finished_at", "finished", age_with_tooltip, ordering="finished_at")

    @admin.display(description="batch tag", ordering="message__tag")
    def tag_cell(self, obj: Delivery) -> SafeString:
        return clip(obj.message.tag) if obj.message.tag else NONE

    @admin.display(description="message")
    def message_link(self, obj: Delivery) -> SafeString:
        message = reverse("admin:django_outbox_message_change", args=[obj.message_id])
        siblings = reverse("admin:django_outbox_delivery_changelist") + f"?message={obj.message_id}"
        return format_html(
            '<a href="{}">{}</a> (<a href="{}">its deliveries</a>)', message, obj.message, siblings
        )

    @admin.display(description="host")
    def host_link(self, obj: Delivery) -> SafeString:
        listing = reverse("admin:django_outbox_delivery_changelist") + f"?host={obj.host}"
        return format_html(
            '<a href="{}">{}</a> (<a href="{}">deliveries to it</a>)',
            host_page(obj.host), obj.host, listing,
        )  # fmt: skip

    @admin.display(description="attempts")
    def attempts_of(self, obj: Delivery) -> str:
        return f"{obj.attempts} of {obj.message.max_attempts}"

    @admin.display(description="next attempt")
    def next_attempt_shown(self, obj: Delivery) -> str:
        return moment_with_age(obj.next_attempt_at) if obj.state in LIVE_STATES else "-"

    created_shown = shown("created_at", "created")
    finished_shown = shown("finished_at", "finished")
    dispatched_shown = shown("dispatched_at", "last published")
    lease_shown = shown("lease_until", "lease until")

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Requeueing and giving up need the permission to change deliveries."""
        return bool(request.user.has_perm("django_outbox.change_delivery"))

    @admin.action(description="Requeue the selected deliveries…", permissions=["manage"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> HttpResponse | None:
        return self.confirm_selected(request, REQUEUE, queryset)

    @admin.action(description="Give up on the selected deliveries…", permissions=["manage"])
    def give_up(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> HttpResponse | None:
        return self.confirm_selected(request, GIVE_UP, queryset)

    def confirm_selected(
        self, request: HttpRequest, change: Change, queryset: QuerySet[Delivery]
    ) -> HttpResponse | None:
        """The confirmation page of an action on the list's selection (the rows ticked,
        or every row the filters match), which posts the same selection back."""
        ticked = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        across = request.POST.get("select_across") == "1"
        filters = [f"{k}={v}" for k, v in request.GET.items() if k not in ("o", "p")]
        described = (
            "every delivery the list's filters match"
            + (f" ({', '.join(filters)})" if filters else "")
            if across
            else f"the deliveries ticked in the list ({len(ticked):,})"
        )
        return confirm_or_act(
            request,
            self.admin_site.each_context(request),
            change,
            queryset,
            described=described,
            hidden=action_fields(request),
            back=request.get_full_path(),
            one=ticked[0] if len(ticked) == 1 and not across else None,
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, without the admin's navigation sidebar: its columns need the room
        (1,400 px fit them with the filters open)."""
        extra = {**(extra_context or {}), "is_nav_sidebar_enabled": False}
        return super().changelist_view(request, extra)

    def get_inlines(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        """The attempt history, and what the active extensions show of the delivery."""
        shown = [inline for extension in active() for inline in extension.delivery_inlines(obj)]
        return [AttemptInline, *shown] if obj is not None else [AttemptInline]

    def get_urls(self) -> list[URLPattern]:
        site = self.admin_site
        return [
            path("overview/", site.admin_view(self.overview_view), name="django_outbox_overview"),
            *change_paths(site, "<int:pk>/", self.one_view, "django_outbox_delivery"),
            *super().get_urls(),
        ]

    def one_view(self, request: HttpRequest, pk: int, change: Change) -> HttpResponse:
        """The delivery page's Requeue and Give up buttons: confirm, then act on it alone."""
        if not self.has_manage_permission(request):
            raise PermissionDenied
        delivery = get_object_or_404(Delivery.objects.only("id", "inbox"), pk=pk)
        back = reverse("admin:django_outbox_delivery_change", args=[pk])
        response = confirm_or_act(
            request,
            self.admin_site.each_context(request),
            change,
            Delivery.objects.filter(pk=pk),
            described=f"delivery #{pk} to {delivery.inbox}",
            hidden=[],
            back=back,
            one=pk,
        )
        return response or HttpResponseRedirect(back)

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        """Queue depth and age, throughput and failures, failing hosts, batches under way."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        can_view_hosts = may_view_hosts(request)
        context = {
            **self.admin_site.each_context(request),
            **overview_context(request, can_view_hosts=can_view_hosts),
            "title": "Outbox overview",
        }
        return TemplateResponse(request, "admin/django_outbox/overview.html", context)


def may_view_hosts(request: HttpRequest) -> bool:
    """Whether the user may see hosts and breakers (as the hosts' admin decides)."""
    user = request.user
    return bool(
        user.has_perm("django_outbox.view_host") or user.has_perm("django_outbox.change_host")
    )


def inbox_path(inbox: str) -> str:
    """What follows the host in ``inbox`` (its path and query)."""
    parts = urlsplit(inbox)
    return parts.path + (f"?{parts.query}" if parts.query else "")

"""The webhook endpoints' admin: endpoints that have been failing, and enabling them again.

A row is an endpoint with failure days (see :mod:`django_outbox.destinations.endpoint_health`);
"disabled since" says which ones get no deliveries, and an endpoint's page says
so in words, with its latest failure.  The list's action, and the Enable button
of an endpoint's page, enable endpoints as ``outbox.enable_endpoint`` does (its
row is deleted: the list holds failing endpoints only), and are written to the
admin's log.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from django_outbox.admin.confirm import log
from django_outbox.admin.formatting import moment_with_age, shown
from django_outbox.admin.readonly import ReadOnlyAdmin
from django_outbox.conf import conf
from django_outbox.destinations.endpoint_health import enable_endpoints
from django_outbox.models import Endpoint
from django_outbox.status.text import seconds


def endpoints_named(urls: list[str]) -> str:
    """``urls`` as a message names them: the one URL, or how many endpoints."""
    return urls[0] if len(urls) == 1 else f"{len(urls):,} endpoints"


def enabled_text(urls: list[str], disabled: int) -> str:
    """What enabling the endpoints ``urls`` did, of which ``disabled`` were disabled."""
    what = endpoints_named(urls)
    if len(urls) == 1:
        was = "it was disabled" if disabled else "it was not disabled"
    else:
        was = f"{disabled:,} of them were disabled"
    text = (
        f"Enabled {what} ({was}): failure days forgotten; new deliveries are sent "
        f"(workers see it within {seconds(conf.HOSTS_REFRESH)})."
    )
    if disabled:
        text += " Deliveries skipped while disabled stay skipped: requeue them to send them."
    return text


class EndpointAdmin(ReadOnlyAdmin):
    """Webhook endpoints that have been failing, disabled or not yet."""

    list_display = ("url", "failure_days", "failing_since", "disabled", "last_status", "last_error")
    list_filter = (("disabled_since", admin.EmptyFieldListFilter),)
    search_fields = ("url",)
    actions = ("enable",)
    fields = readonly_fields = (
        *("url", "state", "failure_days", "failing_since", "last_failure_day"),
        *("last_status", "last_error"),
    )
    change_form_template = "admin/django_outbox/endpoint/change_form.html"

    failing_since = shown("first_failure_at", "failing since", ordering="first_failure_at")
    disabled = shown("disabled_since", "disabled since", ordering="disabled_since")

    @admin.display(description="state")
    def state(self, obj: Endpoint) -> SafeString:
        """Whether the endpoint is disabled, since when, and what that means."""
        if obj.disabled_since is None:
            days = conf.WEBHOOK_DISABLE_AFTER_DAYS
            after = f"disabled after {days:,} failure days" if days else "never disabled"
            return format_html("enabled: its deliveries are sent ({})", after)
        return format_html(
            "<strong>disabled</strong> since {}: its deliveries are skipped until it is enabled",
            moment_with_age(obj.disabled_since),
        )

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Enabling endpoints needs the permission to change them."""
        return bool(request.user.has_perm("django_outbox.change_endpoint"))

    @admin.action(
        description="Enable the selected endpoints (forget their failure days)",
        permissions=["manage"],
    )
    def enable(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> None:
        """Enable the endpoints ticked in the list."""
        self.enable_and_report(request, list(queryset.values_list("pk", "url")))

    def enable_and_report(self, request: HttpRequest, rows: list[tuple[int, str]]) -> None:
        """Enable the endpoints ``rows`` (``(pk, url)``), say what that did, and log it."""
        urls = [url for _, url in rows]
        text = enabled_text(urls, enable_endpoints(urls))
        messages.success(request, text)
        what = endpoints_named(urls)
        log(request, Endpoint, rows[0][0] if len(rows) == 1 else None, f"enable {what}", text)

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<int:pk>/enable/",
                self.admin_site.admin_view(require_POST(self.enable_view)),
                name="django_outbox_endpoint_enable",
            ),
            *super().get_urls(),
        ]

    def enable_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """An endpoint page's Enable button (POST): enable it, then show the list."""
        if not self.has_manage_permission(request):
            raise PermissionDenied
        row = get_object_or_404(Endpoint.objects.only("pk", "url"), pk=pk)
        self.enable_and_report(request, [(row.pk, row.url)])
        return HttpResponseRedirect(reverse("admin:django_outbox_endpoint_changelist"))

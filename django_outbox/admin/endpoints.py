"""The webhook endpoints' admin: endpoints that have been failing, and enabling them again.

A row is an endpoint with failure days (see :mod:`django_outbox.destinations.endpoint_health`);
"disabled since" says which ones get no deliveries.  The action enables the
selected endpoints as ``outbox.enable_endpoint`` does, and is written to the
admin's log.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from django_outbox.admin.confirm import log
from django_outbox.admin.formatting import shown
from django_outbox.admin.readonly import ReadOnlyAdmin
from django_outbox.destinations.endpoint_health import enable_endpoints
from django_outbox.models import Endpoint


class EndpointAdmin(ReadOnlyAdmin):
    """Webhook endpoints that have been failing, disabled or not yet."""

    list_display = ("url", "failure_days", "failing_since", "disabled", "last_status", "last_error")
    list_filter = (("disabled_since", admin.EmptyFieldListFilter),)
    search_fields = ("url",)
    actions = ("enable",)

    failing_since = shown("first_failure_at", "failing since", ordering="first_failure_at")
    disabled = shown("disabled_since", "disabled since", ordering="disabled_since")

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Enabling endpoints needs the permission to change them."""
        return bool(request.user.has_perm("django_outbox.change_endpoint"))

    @admin.action(
        description="Enable the selected endpoints (forget their failure days)",
        permissions=["manage"],
    )
    def enable(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> None:
        rows = list(queryset.values_list("pk", "url"))
        enabled = enable_endpoints(url for _, url in rows)
        what = rows[0][1] if len(rows) == 1 else f"{len(rows):,} endpoints"
        text = f"Enabled {what}: {enabled:,} were disabled; their failure days are forgotten."
        messages.success(request, text)
        log(request, Endpoint, rows[0][0] if len(rows) == 1 else None, f"enable {what}", text)

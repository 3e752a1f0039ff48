"""The hosts' admin: failing hosts, a page per host, its actions, and the open breakers.

A host's page (``host/destination/<name>/``) exists for any host deliveries go to,
failing or not: its deliveries by state, its health row (failure days and since
when), the reason it fails, its breaker, its latest attempts, and what can be done
(requeue what failed since a time, give up on what is live, reset it, pause or
resume it).  Resetting
is :func:`~django_outbox.status.host_report.reset_hosts`, as ``outbox hosts reset`` does.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from django_outbox.admin.confirm import REQUEUE, Change, change_paths, confirm_or_act, log
from django_outbox.admin.deliveries import host_page
from django_outbox.admin.formatting import local_time, shown
from django_outbox.admin.readonly import ReadOnlyAdmin
from django_outbox.breakers import BreakerStoreUnavailable
from django_outbox.breakers.configured import breakers_shared, configured_store
from django_outbox.breakers.policy import breaker_host
from django_outbox.exceptions import InvalidHost, InvalidSince
from django_outbox.extensions.registry import active
from django_outbox.models import Delivery, Host, HostPause
from django_outbox.status.host_report import host_report, reset_hosts
from django_outbox.status.snapshot import FAILED_RESULTS, STATES
from django_outbox.upkeep.bulk import parse_since, parse_until
from django_outbox.upkeep.pauses import pause_host, pauses_in_force, resume_host

#: Said instead of "no breaker is open" when the breakers are out of the web's sight.
BREAKERS_UNSEEN = (
    "Breakers are kept in each worker process's memory (OUTBOX_BREAKER_CACHE is not "
    "set): they cannot be seen or reset from here."
)
#: What a host's requeue and give-up take unless other states are ticked (as the CLI).
HOST_DEFAULTS = {"requeue": ("failed",), "give_up": ("queued", "waiting")}
#: The states each offers.
HOST_OFFERS = {
    "requeue": ("failed", "refused", "skipped"),
    "give_up": ("queued", "waiting", "sending"),
}


@admin.display(description="host", ordering="name")
def host_link(obj: Host | HostPause) -> SafeString:
    """A row's host, linked to the host's page."""
    return format_html('<a href="{}">{}</a>', host_page(obj.name), obj.name)


class HostPauseAdmin(ReadOnlyAdmin):
    """Hosts an operator paused; each links to its page, where it is resumed."""

    list_display = (host_link, "reason", "paused", "ends")
    search_fields = ("name",)
    paused = shown("paused_at", "paused since", ordering="paused_at")
    ends = shown("until", "until", ordering="until")

    def get_queryset(self, request: HttpRequest) -> QuerySet[HostPause]:
        """The pauses in force: an ended one waits for the sweeper to delete its row."""
        return pauses_in_force()


class HostAdmin(ReadOnlyAdmin):
    """Hosts that have been failing; each links to its page."""

    list_display = (host_link, "failure_days", "failing_since", "unavailable")
    list_filter = (("unavailable_since", admin.EmptyFieldListFilter),)
    search_fields = ("name",)
    actions = ("reset",)
    failing_since = shown("first_failure_at", "failing since", ordering="first_failure_at")
    unavailable = shown("unavailable_since", "unavailable since", ordering="unavailable_since")

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Resetting hosts and breakers needs the permission to change hosts."""
        return bool(request.user.has_perm("django_outbox.change_host"))

    @admin.action(
        description="Reset the selected hosts (forget their failures, close their breakers)",
        permissions=["manage"],
    )
    def reset(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        rows = list(queryset.values_list("pk", "name"))
        self.reset_and_report(
            request, [name for _, name in rows], rows[0][0] if len(rows) == 1 else None
        )

    def reset_and_report(self, request: HttpRequest, names: list[str], pk: object) -> None:
        """Reset ``names`` (hosts and breakers), say so honestly, and log it."""
        what = names[0] if len(names) == 1 else f"{len(names):,} hosts"
        try:
            deleted, _ = reset_hosts(names)
        except BreakerStoreUnavailable as error:
            text = f"Forgot the failures of {what}, but its breakers stay open: {error}"
            level = messages.ERROR
        else:
            breakers = (
                "breakers closed"
                if breakers_shared()
                else "breakers are in each worker's memory, and close there on their own"
            )
            text = f"Reset {what}: available again ({deleted:,} had failures, now forgotten); "
            text += f"{breakers}."
            level = messages.SUCCESS
        messages.add_message(request, level, text)
        log(request, Host, pk, f"reset {what}", text)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """A host row's page is the host's page."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if not object_id.isdigit():
            raise Http404("a host row's id is a number")
        return HttpResponseRedirect(host_page(get_object_or_404(Host, pk=object_id).name))

    def get_urls(self) -> list[URLPattern]:
        site = self.admin_site
        return [
            path("breakers/", site.admin_view(self.breakers_view), name="django_outbox_breakers"),
            path(
                "destination/<str:name>/",
                site.admin_view(self.host_view),
                name="django_outbox_host_page",
            ),
            *change_paths(
                site, "destination/<str:name>/", self.host_change_view, "django_outbox_host"
            ),
            path(
                "destination/<str:name>/reset/",
                site.admin_view(require_POST(self.host_reset_view)),
                name="django_outbox_host_reset",
            ),
            path(
                "destination/<str:name>/pause/",
                site.admin_view(require_POST(self.host_pause_view)),
                name="django_outbox_host_pause",
            ),
            path(
                "destination/<str:name>/resume/",
                site.admin_view(require_POST(self.host_resume_view)),
                name="django_outbox_host_resume",
            ),
            *super().get_urls(),
        ]

    def may_see_host(self, request: HttpRequest) -> bool:
        """A host's page shows hosts and deliveries: it needs both view permissions."""
        user = request.user
        deliveries = user.has_perm("django_outbox.view_delivery") or user.has_perm(
            "django_outbox.change_delivery"
        )
        return bool(deliveries and self.has_view_permission(request))

    def host_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """Everything about one host, and its actions."""
        if not self.may_see_host(request):
            raise PermissionDenied
        report = host_report(name)
        failed = [a for a in report.history if not a.held and a.result in FAILED_RESULTS]
        listing = reverse("admin:django_outbox_delivery_changelist")
        can_change = request.user.has_perm("django_outbox.change_delivery")
        context = {
            **self.admin_site.each_context(request),
            "title": f"Host {report.host}",
            "report": report,
            "states": [
                {
                    "state": s,
                    "count": report.counts[s],
                    "url": f"{listing}?host={report.host}&state={s}",
                }
                for s in STATES
            ],
            "deliveries_url": f"{listing}?host={report.host}",
            "due_url": f"{listing}?host={report.host}&due=yes",
            "reason": failed[0] if failed else None,
            "breakers_unseen": not breakers_shared(),
            "links": [link for extension in active() for link in extension.host_links(report.host)],
            "can_change_deliveries": can_change,
            "can_reset": self.has_manage_permission(request),
            "offers": {
                action: [(s, s in HOST_DEFAULTS[action]) for s in states]
                for action, states in HOST_OFFERS.items()
            },
        }
        return TemplateResponse(request, "admin/django_outbox/host.html", context)

    def host_change_view(self, request: HttpRequest, name: str, change: Change) -> HttpResponse:
        """Requeue what failed since a time, or give up on what is live, at one host."""
        if not (
            self.may_see_host(request) and request.user.has_perm("django_outbox.change_delivery")
        ):
            raise PermissionDenied
        name = name.lower()
        back = host_page(name)
        action = "requeue" if change is REQUEUE else "give_up"
        states = [s for s in request.GET.getlist("state") if s in HOST_OFFERS[action]]
        states = states or list(HOST_DEFAULTS[action])
        selection = Delivery.objects.filter(host=name, state__in=states)
        described = f"deliveries to {name} that are {' or '.join(states)}"
        since = request.GET.get("since", "").strip()
        if since:
            try:
                moment = parse_since(since)
            except InvalidSince as error:
                messages.error(request, f"Since {error}; nothing was changed.")
                return HttpResponseRedirect(back)
            finished = change is REQUEUE
            selection = selection.filter(
                **{"finished_at__gte" if finished else "created_at__gte": moment}
            )
            described += f", {'finished' if finished else 'created'} since {local_time(moment)}"
        response = confirm_or_act(
            request,
            self.admin_site.each_context(request),
            change,
            selection,
            described=described,
            hidden=[],
            back=back,
        )
        return response or HttpResponseRedirect(back)

    def host_reset_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """Forget a host's failures and close its breaker (POST)."""
        if not (self.may_see_host(request) and self.has_manage_permission(request)):
            raise PermissionDenied
        name = name.lower()
        row = Host.objects.filter(name=name).values_list("pk", flat=True).first()
        self.reset_and_report(request, [name], row)
        return HttpResponseRedirect(host_page(name))

    def host_pause_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """Hold every delivery to a host, with a reason and an optional end (POST)."""
        if not (self.may_see_host(request) and self.has_manage_permission(request)):
            raise PermissionDenied
        name = name.lower()
        until_text = request.POST.get("until", "").strip()
        try:
            until = parse_until(until_text) if until_text else None
            pause = pause_host(name, request.POST.get("reason", "").strip(), until)
        except (InvalidHost, InvalidSince) as error:
            messages.error(request, f"Not paused: {error}")
            return HttpResponseRedirect(host_page(name))
        end = f"until {local_time(pause.until)}" if pause.until else "until resumed"
        text = f"Paused {name} {end}: its deliveries are held (workers see it within seconds)."
        messages.success(request, text)
        log(request, Host, None, f"paused {name}", text)
        return HttpResponseRedirect(host_page(name))

    def host_resume_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """End a host's pause and send its held deliveries again (POST): due now,
        published over a few seconds (see :func:`resume_host`)."""
        if not (self.may_see_host(request) and self.has_manage_permission(request)):
            raise PermissionDenied
        name = name.lower()
        released = resume_host(name)
        text = f"Resumed {name}: {released:,} held deliveries sent again."
        messages.success(request, text)
        log(request, Host, None, f"resumed {name}", text)
        return HttpResponseRedirect(host_page(name))

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
                keys = request.POST.getlist("key")
                for key in keys:
                    store.reset(key)
                if keys:
                    text = f"Reset {len(keys):,} breakers: {', '.join(keys)}."
                    messages.success(request, text)
                    log(request, Host, None, f"reset {len(keys):,} breakers", text)
                return HttpResponseRedirect(request.get_full_path())
            states = [] if not breakers_shared() else store.states()
        except BreakerStoreUnavailable as failure:
            states, error = [], str(failure)
        context = {
            **self.admin_site.each_context(request),
            "title": "Open circuit breakers",
            "states": [{"state": state, "host": breaker_host(state.key)} for state in states],
            "error": error,
            "unseen": BREAKERS_UNSEEN if not breakers_shared() else "",
            "can_reset": can_reset,
        }
        return TemplateResponse(request, "admin/django_outbox/breakers.html", context)

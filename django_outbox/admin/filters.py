"""The admin lists' filters: each bounded, each showing what is chosen.

The overview links to lists filtered by host, message or due time; these filters
show that choice in the sidebar (a plain URL lookup would filter invisibly).  None
lists every value: a host filter offers the failing hosts, the tag filter a search
box and the latest tags, a message filter only the message chosen.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ERROR_FLAG, PAGE_VAR
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from django_outbox.models import DeliveryState, Host, Message

#: Choices a filter offers at most (besides the one chosen).
OFFERED = 10
#: Newest messages looked at to offer the latest tags.
TAG_SAMPLE = 500


class ChosenFilter(admin.SimpleListFilter):
    """A filter on one field, whatever value the URL gives, shown as chosen; it also
    offers the few values :meth:`offered` returns (none by default: then it is shown
    only while a value is chosen)."""

    #: The field (lookup) the chosen value filters on.
    field = ""

    def __init__(
        self, request: HttpRequest, params: dict[str, Any], model: type[Model], model_admin: Any
    ) -> None:
        #: The other parameters of the list, for a form that changes this one only.
        self.kept = [
            (name, value)
            for name, values in request.GET.lists()
            if name not in (self.parameter_name, PAGE_VAR, ERROR_FLAG)
            for value in values
        ]
        super().__init__(request, params, model, model_admin)

    def offered(self, request: HttpRequest) -> list[tuple[str, str]]:
        """The values offered besides the chosen one, as ``(value, label)``."""
        return []

    def label(self, value: str) -> str:
        """How the chosen ``value`` is shown."""
        return value

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        offered = self.offered(request)
        chosen = self.value()
        if chosen and chosen not in {value for value, _ in offered}:
            offered = [(chosen, self.label(chosen)), *offered]
        return offered

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


class HostFilter(ChosenFilter):
    """Deliveries to one host; offers the hosts failing for the most days."""

    title = "host"
    parameter_name = "host"
    field = "host"

    def value(self) -> str | None:
        value = super().value()
        return value.lower() if value else None

    def offered(self, request: HttpRequest) -> list[tuple[str, str]]:
        names = Host.objects.order_by("-failure_days", "name").values_list("name", flat=True)
        return [(name, f"{name} (failing)") for name in names[:OFFERED]]


class IdFilter(ChosenFilter):
    """A filter on the id of a related row: only the one chosen is shown."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value and not value.isdigit():
            raise IncorrectLookupParameters(f"{self.parameter_name} is an id")
        return super().queryset(request, queryset)


class MessageFilter(IdFilter):
    """Deliveries of one message (its batch), named as the message list names it."""

    title = "message"
    parameter_name = "message"
    field = "message_id"

    def label(self, value: str) -> str:
        found = Message.objects.defer("body").filter(pk=value).first() if value.isdigit() else None
        return str(found) if found else f"message #{value}"


class DeliveryFilter(IdFilter):
    """Rows of one delivery (an extension's list of them)."""

    title = "delivery"
    parameter_name = "delivery"
    field = "delivery_id"

    def label(self, value: str) -> str:
        return f"delivery #{value}"


class TagFilter(ChosenFilter):
    """Deliveries of messages with one batch tag: a search box and the latest tags."""

    title = "batch tag"
    parameter_name = "tag"
    field = "message__tag"
    template = "admin/django_outbox/search_filter.html"

    def offered(self, request: HttpRequest) -> list[tuple[str, str]]:
        latest = (
            Message.objects.exclude(tag="")
            .order_by("-id")
            .values_list("tag", flat=True)[:TAG_SAMPLE]
        )
        tags = list(dict.fromkeys(latest))[:OFFERED]
        return [(tag, tag) for tag in tags]


class StateFilter(admin.SimpleListFilter):
    """Deliveries in one state, as ``?state=failed`` (the overview's and CLI's word)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, state) for state in DeliveryState.values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value and value not in DeliveryState.values:
            raise IncorrectLookupParameters(f"state is one of {', '.join(DeliveryState.values)}")
        return queryset.filter(state=value) if value else queryset


class DueFilter(admin.SimpleListFilter):
    """Queued deliveries whose time has come (the overview's "due" and "oldest due")."""

    title = "due"
    parameter_name = "due"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "due now (queued, its time has come)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() != "yes":
            return queryset
        return queryset.filter(state=DeliveryState.QUEUED, next_attempt_at__lte=timezone.now())

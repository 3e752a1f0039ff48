"""The messages' admin: each activity or webhook sent, its batch's progress, its body."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_outbox.admin.formatting import age_with_tooltip, shown
from django_outbox.admin.readonly import ReadOnlyAdmin
from django_outbox.models import LIVE_STATES, Delivery, DeliveryState, Message
from django_outbox.upkeep.bulk import count_by_state


def deliveries_of(message_id: int, **filters: str) -> str:
    """The deliveries list filtered to one message (and ``filters``)."""
    query = "&".join(f"{key}={value}" for key, value in {"message": message_id, **filters}.items())
    return reverse("admin:django_outbox_delivery_changelist") + "?" + query


class MessageAdmin(ReadOnlyAdmin):
    """Each activity or webhook sent, with its batch's progress.

    A webhook is found by the ``webhook-id`` its receiver reports (exact match).
    """

    list_display = (
        *("id", "activity_type", "signing", "sender", "tag", "lane"),
        *("inboxes", "progress", "created"),
    )
    list_filter = ("signing", "lane", "activity_type")
    search_fields = ("sender", "tag", "=webhook_id")
    fields = readonly_fields = (
        *("deliveries", "sender", "signing", "webhook_id", "activity_type", "tag", "lane"),
        *("deadline_shown", "ordering_key", "max_attempts", "inboxes", "created_shown"),
        *("content_type", "body_text"),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        live = Q(deliveries__state__in=LIVE_STATES)
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

    @admin.display(description="inboxes", ordering="inbox_count")
    def inboxes(self, obj: Message) -> str:
        return f"{obj.inbox_count:,}"

    created = shown("created_at", "created", age_with_tooltip, ordering="created_at")

    @admin.display(description="progress")
    def progress(self, obj: Any) -> SafeString:
        total = max(1, obj.delivered + obj.failed + obj.live, obj.inbox_count)
        summary = f"{obj.delivered:,} delivered, {obj.failed:,} failed, {obj.live:,} in progress"
        return format_html(
            '<a href="{}" title="{}"><div style="display:flex;'
            'width:160px;height:10px;background:#eee">'
            '<span style="width:{}%;background:#417690"></span>'
            '<span style="width:{}%;background:#ba2121"></span></div></a>'
            "<small>{}</small>",
            deliveries_of(obj.pk),
            summary,
            round(100 * obj.delivered / total, 1),
            round(100 * obj.failed / total, 1),
            summary,
        )

    @admin.display(description="deliveries")
    def deliveries(self, obj: Message) -> SafeString:
        counts = count_by_state(Delivery.objects.filter(message_id=obj.pk))
        parts = format_html_join(
            ", ",
            '<a href="{}">{} {}</a>',
            (
                (deliveries_of(obj.pk, state=state), f"{counts[state]:,}", state)
                for state in DeliveryState.values
                if counts.get(state)
            ),
        )
        return format_html(
            '<a href="{}">all {}</a>{}{}',
            deliveries_of(obj.pk),
            f"{sum(counts.values()):,}",
            ": " if counts else "",
            parts,
        )

    deadline_shown = shown("deadline", "deadline")
    created_shown = shown("created_at", "created")

    @admin.display(description="body")
    def body_text(self, obj: Message) -> SafeString:
        """The exact bytes sent, indented when they are JSON (they are bounded by
        ``OUTBOX_MAX_BODY_BYTES``)."""
        text = bytes(obj.body).decode(errors="replace")
        with contextlib.suppress(ValueError):  # not JSON: shown as it is
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        return format_html('<pre id="outbox-body" style="white-space:pre-wrap">{}</pre>', text)

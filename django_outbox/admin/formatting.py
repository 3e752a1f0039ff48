"""How the admin writes times, ages, durations and counts: as ``outbox status`` does.

Durations are :func:`~django_outbox.status.text.seconds` (``0.042s``, ``2m 31s``,
``3h 02m``, ``2d 4h``); moments are local times (the current time zone) with seconds,
and in lists an age with the moment as its tooltip.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from django_outbox.status.text import seconds

#: What a cell shows for nothing.
NONE = mark_safe("-")


def local_time(moment: datetime | None) -> str:
    """``moment`` as ``YYYY-MM-DD HH:MM:SS`` in the current time zone; ``-`` for none."""
    if moment is None:
        return "-"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")


def relative(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago ``moment`` was (``3m 12s ago``), or how soon it is (``in 40s``)."""
    if moment is None:
        return "-"
    offset = ((now or timezone.now()) - moment).total_seconds()
    return f"{seconds(offset)} ago" if offset >= 0 else f"in {seconds(-offset)}"


def moment_with_age(moment: datetime | None, now: datetime | None = None) -> SafeString:
    """The local time and, after it, how long ago (or how soon) it is."""
    if moment is None:
        return NONE
    return format_html("{} <small>({})</small>", local_time(moment), relative(moment, now))


def age_with_tooltip(moment: datetime | None, now: datetime | None = None) -> SafeString:
    """How long ago ``moment`` was, with its local time as the tooltip (for lists)."""
    if moment is None:
        return NONE
    return format_html('<span title="{}">{}</span>', local_time(moment), relative(moment, now))


def count(value: int | None) -> str:
    """A whole number with thousands separators; ``-`` for none."""
    return "-" if value is None else f"{value:,}"


def msat(value: int | None) -> str:
    """An amount in millisatoshis, with separators and its unit."""
    return "-" if value is None else f"{value:,} msat"


def shown(
    field: str,
    description: str,
    how: Callable[[Any], str] = moment_with_age,
    *,
    ordering: str | None = None,
) -> Callable[[Any, Any], str]:
    """A list column or read-only field showing ``field`` of a row written by ``how``
    (by default a local time with its age), sorted by ``ordering`` if given."""

    @admin.display(description=description, ordering=ordering)
    def column(model_admin: Any, obj: Any) -> str:
        return how(getattr(obj, field))

    return column

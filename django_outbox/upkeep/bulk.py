"""Requeue or give up on a selection of deliveries of any size, as the CLI and admin do.

A selection is a queryset (filters, a host, a batch tag...).  Its ids are read in
pages of :data:`CHUNK`, in the order of the primary key, and each page goes to
:func:`~django_outbox.upkeep.operations.requeue` or :func:`~django_outbox.upkeep.operations.give_up`
(the same signals and successors as the API), so memory stays bounded however
many rows match, and a page is one transaction's worth of work.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.db.models import Count, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_outbox.exceptions import InvalidSince
from django_outbox.models import FINAL_STATES, LIVE_STATES, Delivery, DeliveryState
from django_outbox.upkeep import operations

#: Ids requeued or given up per transaction.
CHUNK = 5000
#: What a requeue takes unless delivered deliveries are asked for too: those sent
#: already would be sent again.
REQUEUED_STATES = tuple(state.value for state in FINAL_STATES if state != DeliveryState.DELIVERED)
#: Everything a requeue can take, delivered included.
FINAL = tuple(state.value for state in FINAL_STATES)
#: What a give-up can take.
LIVE = tuple(state.value for state in LIVE_STATES)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(value: str) -> datetime:
    """``90s``, ``30m``, ``2h``, ``7d`` ago, or an ISO 8601 date and time (local if naive).

    Raises :class:`~django_outbox.exceptions.InvalidSince` for anything else.
    """
    return _moment(value, -1)


def parse_until(value: str) -> datetime:
    """``90s``, ``30m``, ``2h``, ``7d`` from now, or a date as :func:`parse_since` reads it."""
    return _moment(value, 1)


def _moment(value: str, direction: int) -> datetime:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", value.strip())
    if match:
        seconds = float(match[1]) * _UNITS[match[2]]
        return timezone.now() + timedelta(seconds=direction * seconds)
    try:
        moment = parse_datetime(value.strip())
    except ValueError:  # well formed, but not a date (a 13th month)
        moment = None
    if moment is None:
        raise InvalidSince(f"{value!r}: give a duration (90s, 30m, 2h, 7d) or a date")
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def count_by_state(selection: QuerySet[Delivery]) -> dict[str, int]:
    """How many deliveries of ``selection`` are in each state (states with none left out)."""
    rows = selection.order_by().values_list("state").annotate(n=Count("id"))
    return {state: n for state, n in rows}


def requeue(selection: QuerySet[Delivery], states: Iterable[str] = REQUEUED_STATES) -> int:
    """Queue again the deliveries of ``selection`` in ``states`` (final states; delivered
    ones only if named); returns how many were requeued."""
    allowed = [state for state in states if state in FINAL]
    return _in_chunks(selection.filter(state__in=allowed), operations.requeue)


def give_up(selection: QuerySet[Delivery], reason: str, states: Iterable[str] = LIVE) -> int:
    """Fail now the live deliveries of ``selection`` in ``states``; returns how many."""
    allowed = [state for state in states if state in LIVE]
    return _in_chunks(
        selection.filter(state__in=allowed), lambda ids: operations.give_up(ids, reason)
    )


def _in_chunks(selection: QuerySet[Delivery], act: Callable[[list[int]], int]) -> int:
    changed, last = 0, 0
    ids = selection.order_by("id").values_list("id", flat=True)
    while chunk := list(ids.filter(id__gt=last)[:CHUNK]):
        changed += act(chunk)
        last = chunk[-1]
    return changed

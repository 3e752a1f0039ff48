"""Failure days: the rule by which hosts become unavailable and webhook endpoints disabled.

As Mastodon's delivery failure tracker: a destination that fails gets a row, which
counts the distinct days it failed on; a success deletes the row; once the count
reaches a threshold the row is marked (``Host.unavailable_since``,
``Endpoint.disabled_since``) and deliveries to it are skipped.  One day of failures
counts once however many attempts failed that day, so a destination is judged on
days, not on how much was sent to it.  :class:`MarkedNames` is each worker
process's copy of the marked destinations, read again every ``OUTBOX_HOSTS_REFRESH``
seconds.  :mod:`~django_outbox.destinations.availability` and
:mod:`~django_outbox.destinations.endpoint_health` apply the rule, each to its own table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Mapping
from typing import Any

from django.db import models
from django.db.models import Case, F, Value, When
from django.utils import timezone

from django_outbox.conf import conf


def count_failure_day(
    model: type[models.Model],
    key: str,
    failures: Mapping[str, Mapping[str, Any]],
    *,
    after_days: int | None,
    mark: str,
) -> list[str]:
    """Count today as a failure day for each destination of ``failures``; those it marks.

    ``model`` has a unique ``key`` column naming the destination, the columns
    ``failure_days``, ``first_failure_at`` and ``last_failure_day``, and ``mark``, the
    time it was marked.  Each value of ``failures`` holds fields to store on its
    destination's row (its latest failure), or nothing.  A destination reaching
    ``after_days`` (``None``: never) is marked now; the names marked by this call are
    returned, each by one call only when several processes count at once.  Run it
    in the transaction that saves the outcomes.
    """
    if not failures:
        return []
    names = sorted(failures)
    now = timezone.now()
    today = now.date()
    rows = model._default_manager.filter(**{f"{key}__in": names})
    latest = _latest_fields(model, key, failures)
    if latest:
        rows.update(**latest)
    rows.exclude(last_failure_day=today).update(
        failure_days=F("failure_days") + 1, last_failure_day=today
    )
    model._default_manager.bulk_create(
        [
            model(**{key: name, **failures[name]}, last_failure_day=today, first_failure_at=now)
            for name in names
        ],
        ignore_conflicts=True,
    )
    if after_days is None:
        return []
    unmarked = rows.filter(failure_days__gte=after_days, **{f"{mark}__isnull": True})
    return [
        name
        for name in unmarked.values_list(key, flat=True)
        # One update per name, conditional: of two processes, one marks it.
        if rows.filter(**{key: name, f"{mark}__isnull": True}).update(**{mark: now})
    ]


def _latest_fields(
    model: type[models.Model], key: str, failures: Mapping[str, Mapping[str, Any]]
) -> dict[str, Case]:
    """For each field the failures set, the ``CASE`` expression giving each row its value."""
    fields = sorted({field for values in failures.values() for field in values})
    return {
        field: Case(
            *(
                When(**{key: name}, then=Value(values[field]))
                for name, values in failures.items()
                if field in values
            ),
            default=F(field),
            output_field=_column(model, field),
        )
        for field in fields
    }


def _column(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    """The field ``name`` of ``model``: a column, not a relation."""
    column = model._meta.get_field(name)
    assert isinstance(column, models.Field)
    return column


class MarkedNames:
    """A worker process's copy of the destinations whose ``mark`` is set.

    At most ``OUTBOX_HOSTS_REFRESH`` seconds old, so that a destination another
    process marks, or an operator clears, is seen within that time.
    """

    def __init__(self, model: type[models.Model], key: str, mark: str) -> None:
        self._rows = (model, key, mark)
        self._names: frozenset[str] = frozenset()
        self._read_at = 0.0
        self._lock = threading.Lock()

    def get(self) -> frozenset[str]:
        """The marked names, read again when the copy is too old."""
        with self._lock:
            names, read_at = self._names, self._read_at
        if time.monotonic() - read_at < conf.HOSTS_REFRESH:
            return names
        model, key, mark = self._rows
        names = frozenset(
            model._default_manager.filter(**{f"{mark}__isnull": False}).values_list(key, flat=True)
        )
        with self._lock:
            self._names, self._read_at = names, time.monotonic()
        return names

    def holds_any(self, names: Collection[str]) -> bool:
        """Whether the copy (as last read) holds any of ``names``."""
        with self._lock:
            return not self._names.isdisjoint(names)

    def forget(self) -> None:
        """Read the marked names again on next use."""
        with self._lock:
            self._names, self._read_at = frozenset(), 0.0

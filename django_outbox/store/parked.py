"""Ending holds early: deliveries parked for a host, made due now.

A delivery held while its host is paid is parked in the database until its hold ends
(:func:`~django_outbox.store.transitions.park`).  When what it waited for happens
sooner (a token bought, a payment slot freed), :func:`release_parked` makes it due at
once and hands back its id to publish, rather than leave it to its hold timer and the
recovery pass.  Only rows still queued with one of the given reasons are touched, so a
delivery that moved on meanwhile is left alone.
"""

from __future__ import annotations

from collections.abc import Collection

from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.queries import STEP


def release_parked(host: str, reasons: Collection[str], limit: int | None = None) -> list[int]:
    """Make due now the queued deliveries to ``host`` parked for one of ``reasons``
    (their ``last_error``) and not due yet: the ``limit`` due first (all, up to
    :data:`~django_outbox.store.queries.STEP`, when None).  Their ids, to publish (one
    that moved on meanwhile is published for nothing: a claim takes only queued rows
    that are due); they are marked dispatched now, as any delivery published."""
    now = timezone.now()
    parked = Delivery.objects.filter(
        host=host, state=DeliveryState.QUEUED, last_error__in=list(reasons), next_attempt_at__gt=now
    )
    first = parked.order_by("next_attempt_at", "id").values_list("id", flat=True)
    ids = list(first[: STEP if limit is None else max(0, limit)])
    if ids:
        parked.filter(id__in=ids).update(next_attempt_at=now, dispatched_at=now)
    return ids

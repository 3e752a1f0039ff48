"""Taking back deliveries claimed by a worker that is gone: the second writer of
``Delivery.state`` beside :mod:`django_outbox.store.transitions`, for ``sending → queued``.

Two ways to know a worker is gone.  Its heartbeat stopped
(:func:`orphaned`): a process beats every ``OUTBOX_HEARTBEAT_INTERVAL`` seconds,
so one silent for ``OUTBOX_HEARTBEAT_TIMEOUT`` is dead, and its claims are
taken back at once; a live process's claims are left alone however long its
requests take.  Or the claim's lease lapsed (:func:`lapsed`), the last resort
for a worker that beats but never reports back.  Either way a delivery taken
back keeps the attempt it spent, so one that kills its worker every time runs
out of attempts; one that has spent them all is given up on instead.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.models import Delivery, DeliveryState, locked
from django_outbox.store.heartbeats import owner_alive
from django_outbox.store.queries import STEP, Lanes, by_lane


def lapsed() -> QuerySet[Delivery]:
    """Claimed deliveries whose lease ran out, by the database's clock (which set it)."""
    return Delivery.objects.filter(state=DeliveryState.SENDING, lease_until__lt=Now())


def orphaned(timeout: float) -> QuerySet[Delivery]:
    """Claimed deliveries whose owner has not beaten for ``timeout`` seconds.

    Only claims older than ``timeout`` (by their lease, which started at the
    claim): a process beats before it first claims, so a younger claim's owner
    cannot have been silent that long, and a claim whose owner has no row at all
    (a worker of an older version) is not taken back before then either.
    """
    claimed_before = Now() + timedelta(seconds=conf.LEASE_SECONDS - timeout)
    return (
        Delivery.objects.filter(state=DeliveryState.SENDING, lease_until__lt=claimed_before)
        .alias(alive=owner_alive("claimed_by", timeout))
        .filter(alive=False)
    )


def spent(abandoned: QuerySet[Delivery]) -> list[int]:
    """The ids among ``abandoned`` that have spent every attempt (a step's worth)."""
    over = abandoned.filter(attempts__gte=F("message__max_attempts"))
    return list(over.values_list("id", flat=True)[:STEP])


def requeue_abandoned(abandoned: QuerySet[Delivery], error: str) -> Lanes:
    """Queue again, with ``error`` noted, those of ``abandoned`` with attempts left."""
    now = timezone.now()
    with transaction.atomic():
        rows = list(
            locked(abandoned.filter(attempts__lt=F("message__max_attempts"))).values_list(
                "id", "lane", "claimed_by"
            )[:STEP]
        )
        for token, ids in _by_token(rows).items():
            Delivery.objects.filter(
                id__in=ids, state=DeliveryState.SENDING, claimed_by=token
            ).update(
                state=DeliveryState.QUEUED,
                next_attempt_at=now,
                dispatched_at=now,
                last_error=error,
                claimed_by="",
                lease_until=None,
            )
    return by_lane((pk, lane) for pk, lane, _ in rows)


def _by_token(rows: list[tuple[int, str, str]]) -> dict[str, list[int]]:
    """The ids of ``(id, lane, claimed_by)`` rows by claim token."""
    found: dict[str, list[int]] = {}
    for pk, _, token in rows:
        found.setdefault(token, []).append(pk)
    return found

"""Writing delivery rows for a message, in the caller's transaction or a worker's.

Small sends write their rows inside ``outbox.send``; a large fan-out stores
its inbox list on the message and a worker expands it here in slices, each
slice committed and dispatched before the next is written, so the first
deliveries start while the rest are still being written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from django_outbox._pg_rows import insert_deliveries
from django_outbox.conf import conf
from django_outbox.models import LIVE_STATES, Delivery, DeliveryState, Lane, Message
from django_outbox.validation import inbox_host

FIRST_SLICE = 500
SLICE = 5000


def choose_lane(inbox_count: int, low_priority: bool) -> str:
    """The lane a send to ``inbox_count`` inboxes travels in."""
    if low_priority and conf.LOW_LANE:
        return Lane.LOW.value
    if inbox_count <= conf.PRIORITY_MAX_INBOXES:
        return Lane.PRIORITY.value
    return Lane.DEFAULT.value


def _waiting_inboxes(message: Message, inboxes: Sequence[str]) -> set[str]:
    """Inboxes that still have a live delivery sent earlier with the same ordering key."""
    if not message.ordering_key:
        return set()
    if connection.vendor == "postgresql":
        # Sends with one key take turns until they commit, so that each sees
        # the rows of the one before it (SQLite writers take turns anyway).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [message.ordering_key])
    return set(
        Delivery.objects.filter(
            ordering_key=message.ordering_key,
            inbox__in=inboxes,
            state__in=LIVE_STATES,
            message_id__lt=message.pk,
        ).values_list("inbox", flat=True)
    )


def create_deliveries(
    message: Message, inboxes: Sequence[str], via: Mapping[str, list[str]] | None = None
) -> dict[str, list[int]]:
    """Insert one delivery per inbox and return the ids to dispatch, by lane.

    Deliveries that must wait for an earlier one with the same ordering key
    are written as ``waiting`` and not returned: they are dispatched when the
    one before them finishes.
    """
    now = timezone.now()
    via = via or {}
    waiting = _waiting_inboxes(message, inboxes)
    vias = [via.get(inbox, []) for inbox in inboxes]
    hosts = [
        inbox_host(gateways[0] if gateways else inbox)
        for inbox, gateways in zip(inboxes, vias, strict=True)
    ]
    if connection.vendor == "postgresql":
        queued = insert_deliveries(message, inboxes, hosts, vias, waiting, now)
    else:
        rows = [
            Delivery(
                message=message,
                inbox=inbox,
                host=host,
                via=gateways,
                lane=message.lane,
                ordering_key=message.ordering_key,
                state=DeliveryState.WAITING if inbox in waiting else DeliveryState.QUEUED,
                next_attempt_at=now,
                dispatched_at=None if inbox in waiting else now,
                created_at=now,
            )
            for inbox, host, gateways in zip(inboxes, hosts, vias, strict=True)
        ]
        Delivery.objects.bulk_create(rows, batch_size=2000)
        queued = [row.pk for row in rows if row.state == DeliveryState.QUEUED]
    if waiting:
        _promote_freed_on_commit(message.pk, message.ordering_key)
    return {message.lane: queued} if queued else {}


def _promote_freed_on_commit(message_id: int, ordering_key: str) -> None:
    """Once the rows commit, queue those whose earlier delivery finished meanwhile.

    The worker that finishes the earlier delivery looks for its successor
    right after saving; if this transaction had not committed by then, it
    found none, and without this the new row would wait for the sweeper.
    """

    def promote_freed() -> None:
        from django_outbox.dispatch import publish
        from django_outbox.ordering import promote_successors

        earlier_live = Delivery.objects.filter(
            ordering_key=ordering_key,
            inbox=OuterRef("inbox"),
            state__in=LIVE_STATES,
            message_id__lt=message_id,
        )
        freed = Delivery.objects.filter(message_id=message_id, state=DeliveryState.WAITING).filter(
            ~Exists(earlier_live)
        )
        promoted = promote_successors(
            (ordering_key, inbox) for inbox in freed.values_list("inbox", flat=True)
        )
        if promoted:
            publish(promoted)

    transaction.on_commit(promote_freed, robust=True)


def expand(message_id: int) -> int:
    """Write and dispatch the deliveries of a large fan-out; returns how many it wrote.

    Safe to run again after a crash: inboxes that already have a row are
    skipped, and the list is cleared only once every slice is written.
    """
    from django_outbox.dispatch import publish

    message = Message.objects.filter(pk=message_id).first()
    if message is None or not message.pending_inboxes:
        return 0
    done = set(Delivery.objects.filter(message=message).values_list("inbox", flat=True))
    todo = [i for i in message.pending_inboxes.split("\n") if i and i not in done]
    written = 0
    size = FIRST_SLICE
    while written < len(todo):
        part = todo[written : written + size]
        with transaction.atomic():
            ids = create_deliveries(message, part)
        publish(ids)
        written += len(part)
        size = SLICE
    Message.objects.filter(pk=message_id).update(pending_inboxes="")
    return written

"""Writing the delivery rows of a send, in the caller's transaction or a worker's.

Small sends write their rows inside ``outbox.send``; a large fan-out stores
its inbox list on the message and a worker expands it here in slices, each
slice committed and dispatched before the next is written, so the first
deliveries start while the rest are still being written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.db import transaction

from django_outbox.conf import conf
from django_outbox.dispatch import publish, publish_on_commit
from django_outbox.models import Delivery, Lane, Message
from django_outbox.store.transitions import create_deliveries, promote_freed

FIRST_SLICE = 500
SLICE = 5000


def choose_lane(inbox_count: int, low_priority: bool) -> str:
    """The lane a send to ``inbox_count`` inboxes travels in."""
    if low_priority and conf.LOW_LANE:
        return Lane.LOW.value
    if inbox_count <= conf.PRIORITY_MAX_INBOXES:
        return Lane.PRIORITY.value
    return Lane.DEFAULT.value


def write_deliveries(
    message: Message, inboxes: Sequence[str], via: Mapping[str, list[str]] | None = None
) -> None:
    """Insert a delivery per inbox; publish the queued ones once the transaction commits.

    Deliveries that wait behind an earlier one with their ordering key are
    looked at again on commit: the worker that finishes the earlier one looks
    for its successor right after saving, and found none if these rows were not
    committed yet.
    """
    queued, waiting = create_deliveries(message, inboxes, via)
    publish_on_commit(queued)
    if waiting:
        message_id, key = message.pk, message.ordering_key

        def promote_freed_deliveries() -> None:
            publish(promote_freed(message_id, key))

        transaction.on_commit(promote_freed_deliveries, robust=True)


def expand(message_id: int) -> int:
    """Write and dispatch the deliveries of a large fan-out; returns how many it wrote.

    Safe to run again after a crash: inboxes that already have a row are
    skipped, and the list is cleared only once every slice is written.
    """
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
            write_deliveries(message, part)
        written += len(part)
        size = SLICE
    Message.objects.filter(pk=message_id).update(pending_inboxes="")
    return written

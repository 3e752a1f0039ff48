"""How far one message has got: its recipients counted by state (``outbox.progress``).

A recipient here is one inbox (or webhook endpoint) the message goes to: one
delivery.  Recipients that ``send`` reached through a shared inbox count as that
one inbox, since one delivery, one request and one answer stand for all of them
(the server got the activity or it did not); an application that wants followers
rather than servers counts them per shared inbox itself.  Recipients left out at
send time (the sender's own hosts, duplicates) are not counted.

The inboxes of a large fan-out not yet written as deliveries (its
:class:`~django_outbox.models.PendingInboxes` slices) count as pending, so the
total is the number of inboxes from the moment ``send`` returns.  Everything is
read in one statement, so an expansion committing meanwhile is counted once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Length, Replace

from django_outbox.exceptions import UnknownMessage
from django_outbox.models import Delivery, DeliveryState, Message, PendingInboxes


@dataclass(frozen=True)
class Progress:
    """A message's recipients (inboxes) by state; see :mod:`django_outbox.status.progress`."""

    delivered: int = 0
    #: Waiting, queued or being sent, or not yet expanded from a large fan-out.
    pending: int = 0
    #: Given up on: attempts or deadline spent, or by hand.
    failed: int = 0
    #: Answered with a status that will not change (a 404, a 410...).
    refused: int = 0
    #: Not sent: its host unavailable, or its webhook endpoint disabled.
    skipped: int = 0

    @property
    def total(self) -> int:
        """Every recipient of the message."""
        return self.delivered + self.pending + self.failed + self.refused + self.skipped

    @property
    def done(self) -> bool:
        """Whether no recipient is pending any more."""
        return self.pending == 0

    def as_dict(self) -> dict[str, int]:
        """The counts and the total, for a JSON answer."""
        return {**asdict(self), "total": self.total}


_FINAL = {
    "delivered": DeliveryState.DELIVERED,
    "failed": DeliveryState.FAILED,
    "refused": DeliveryState.REFUSED,
    "skipped": DeliveryState.SKIPPED,
}


def message_progress(message: object) -> Progress:
    """The :class:`Progress` of ``message``: a :class:`~django_outbox.models.Message`,
    its id, or ``None`` (what ``send`` returns when there was no one to send to).

    Raises :class:`~django_outbox.exceptions.UnknownMessage` for an id (or a
    message) that is not stored, such as one pruned after ``OUTBOX_RETENTION``,
    and for anything else.
    """
    if message is None:
        return Progress()
    if isinstance(message, Message):
        pk = message.pk
    elif type(message) is int:
        pk = message
    else:
        raise UnknownMessage(
            f"progress() takes a Message, its id or None, not {type(message).__name__}"
        )
    deliveries = Delivery.objects.filter(message=OuterRef("pk")).order_by().values("message")
    counts = {
        name: _scalar(deliveries.filter(state=state).annotate(n=Count("pk")).values("n"))
        for name, state in _FINAL.items()
    }
    counts["written"] = _scalar(deliveries.annotate(n=Count("pk")).values("n"))
    lines = Length("inboxes") - Length(Replace("inboxes", Value("\n"), Value(""))) + 1
    slices = PendingInboxes.objects.filter(message=OuterRef("pk")).order_by().values("message")
    counts["unexpanded"] = _scalar(slices.annotate(n=Sum(lines)).values("n"))
    row = Message.objects.filter(pk=pk).annotate(**counts).values_list(*counts).first()
    if row is None:
        raise UnknownMessage(f"no message {pk} is stored (it may have been pruned)")
    found = dict(zip(counts, row, strict=True))
    final = {name: found[name] for name in _FINAL}
    pending = found["written"] - sum(final.values()) + found["unexpanded"]
    return Progress(pending=pending, **final)


def _scalar(query: QuerySet[Any, Any]) -> Coalesce:
    """The count ``query`` returns for the outer message, 0 when it finds no row."""
    return Coalesce(Subquery(query), 0, output_field=IntegerField())

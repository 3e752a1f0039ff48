"""Deliveries claimed as a worker claims them, and the outcomes of attempts at them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from django_outbox.models import Delivery, DeliveryState
from django_outbox.store.claim_rows import load_messages
from django_outbox.store.transitions import claim
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptResult, Outcome
from testproject.demo.keys import ACTOR
from tests.support.observability import deliveries
from tests.support.rows import claimed_row


def claimed(
    count: int, token: str = "t1", host: str = "a.example", **message: Any
) -> list[Delivery]:
    """``count`` deliveries to ``host`` of a new message (``message``: its fields), claimed
    with ``token`` by the package's claim: being sent, one attempt counted, leased."""
    due = timezone.now() - timedelta(seconds=1)
    rows = deliveries(
        count, host=host, sent=message, state=DeliveryState.QUEUED, next_attempt_at=due
    )
    return _claimed([row.pk for row in rows], token)


def reclaim(row: Delivery, token: str) -> Delivery:
    """Claim ``row`` again once it is queued: made due now, as its retry would come due."""
    Delivery.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now())
    (again,) = _claimed([row.pk], token)
    return again


def _claimed(ids: list[int], token: str) -> list[Delivery]:
    taken = {row.id for row in claim(ids, token)}
    assert taken == set(ids), "every row is claimed"
    return list(Delivery.objects.filter(pk__in=ids).order_by("id"))


def outcome(row: Delivery | int, result: AttemptResult, token: str = "", **details: Any) -> Outcome:
    """The outcome of an attempt at ``row`` under its claim (or ``token``), or at a
    made-up delivery with that id claimed with ``token`` ("t1" unless given)."""
    if isinstance(row, int):
        made_up = ClaimedRow(row, 0, "", "", [], "outbox", "", 1, token or "t1")
        message = MessageData(0, ACTOR, b"{}", b"", "", None, "", False, 16)
        return Outcome(made_up, message, result, **details)
    message = load_messages([row.message_id])[row.message_id]
    return Outcome(claimed_row(row, token), message, result, **details)


def delivered(row: Delivery, token: str = "") -> Outcome:
    """A 202 for ``row``."""
    return outcome(row, AttemptResult.DELIVERED, token, status=202)

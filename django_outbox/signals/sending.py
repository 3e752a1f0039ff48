"""Sending the package's signals with the arguments ``signals.py`` documents.

Most sites connect no receiver, or one to a single signal.  Loading every row
of a batch as a model instance and building three sets of keyword arguments
per outcome costs far more than saving it, so the recorder notes what each
outcome would send (:class:`AttemptSignals`), and only for the signals that
have receivers are the rows loaded and the arguments built.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.dispatch import Signal

from django_outbox.models import SETTLED_STATES, Delivery, DeliveryState, Signing
from django_outbox.signals import delivery_attempted, delivery_failed, delivery_settled, send_logged
from django_outbox.values.outcomes import UNSPENT_RESULTS, AttemptResult, Outcome
from django_outbox.values.safe_text import one_line

_FAILED_STATES = (DeliveryState.FAILED, DeliveryState.REFUSED)


def _webhook_skipped(outcome: Outcome, state: str) -> bool:
    """Whether a webhook was skipped: for its sender, a failure (``docs/signals.md``)."""
    return state == DeliveryState.SKIPPED and outcome.message.signing == Signing.STANDARD_WEBHOOKS


def common_args(row: Delivery) -> dict[str, Any]:
    """The arguments every signal carries: ``delivery``, ``inbox`` and ``actor``."""
    return {"delivery": row, "inbox": row.inbox, "actor": row.message.sender}


def failure_args(row: Delivery) -> dict[str, Any]:
    """The arguments of ``delivery_failed`` for ``row``, which carries its final state."""
    return {
        **common_args(row),
        "status": row.last_status,
        "error": row.last_error,
        "tag": row.message.tag,
        "deadline": row.deadline_reached,
    }


def attempt_args(row: Delivery, outcome: Outcome) -> dict[str, Any]:
    """The arguments of ``delivery_attempted`` for ``outcome`` of ``row``."""
    return {
        **common_args(row),
        "status": outcome.status,
        "error": one_line(outcome.error),
        "held": outcome.result is AttemptResult.HELD,
        "outcome": outcome.result.value,
    }


def settled_args(row: Delivery, outcome: Outcome) -> dict[str, Any]:
    """The arguments of ``delivery_settled`` for ``outcome`` of ``row``."""
    return {
        **common_args(row),
        "tag": row.message.tag,
        "outcome": outcome.result.value,
        "status": outcome.status,
        "amount_msat": outcome.report.paid_msat if outcome.report else 0,
    }


def send_failed(rows: Iterable[Delivery]) -> None:
    """Send ``delivery_failed`` for rows given up, which carry their final state."""
    if delivery_failed.has_listeners(Delivery):
        for row in rows:
            send_logged(delivery_failed, Delivery, **failure_args(row))


def full_rows(ids: list[int]) -> dict[int, Delivery]:
    """The deliveries with ``ids`` as the signals pass them: with their message, but
    not its body."""
    rows = Delivery.objects.select_related("message").defer("message__body")
    return {row.pk: row for row in rows.filter(id__in=ids).order_by()}


class AttemptSignals:
    """What a batch of outcomes sends, noted before its rows are saved.

    Whether each signal has receivers is asked once, when the batch starts,
    and only the rows of outcomes that send a signal are loaded, in one query.
    """

    def __init__(self) -> None:
        self.attempted = delivery_attempted.has_listeners(Delivery)
        self.settled = delivery_settled.has_listeners(Delivery)
        self.failed = delivery_failed.has_listeners(Delivery)
        self._notes: list[tuple[Signal, int, Outcome]] = []
        self._changes: dict[int, tuple[dict[str, Any], bool]] = {}

    def note(self, outcome: Outcome, fields: dict[str, Any]) -> None:
        """Note the signals of ``outcome``, which sets ``fields`` on its delivery."""
        pk, state = outcome.row.id, fields["state"]
        count = len(self._notes)
        if self.attempted and outcome.result is not AttemptResult.RELEASED:
            self._notes.append((delivery_attempted, pk, outcome))
        if self.settled and state in SETTLED_STATES:
            self._notes.append((delivery_settled, pk, outcome))
        if self.failed and (state in _FAILED_STATES or _webhook_skipped(outcome, state)):
            self._notes.append((delivery_failed, pk, outcome))
        if len(self._notes) > count:
            self._changes[pk] = (fields, outcome.result in UNSPENT_RESULTS)

    def send(self) -> None:
        """Send the noted signals in order, each row carrying its new state."""
        if not self._notes:
            return
        rows = full_rows(list(self._changes))
        for pk, (fields, unspent) in self._changes.items():
            row = rows.get(pk)
            if row is None:
                continue
            for name, value in fields.items():
                if name != "attempts":
                    setattr(row, name, value)
            if unspent:
                row.attempts -= 1
        for signal, pk, outcome in self._notes:
            row = rows.get(pk)
            if row is None:
                continue  # deleted meanwhile: its update will find nothing either
            if signal is delivery_attempted:
                kwargs = attempt_args(row, outcome)
            elif signal is delivery_settled:
                kwargs = settled_args(row, outcome)
            else:
                kwargs = failure_args(row)
            send_logged(signal, Delivery, **kwargs)

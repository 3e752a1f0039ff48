"""Saving what came of attempts: row updates, retries, signals, successors.

The delivery threads never touch the database.  They hand each
:class:`~django_outbox.outcomes.Outcome` to the process's :class:`Recorder`,
whose one thread saves them in batches, on one connection, each update
conditional on the claim still being the one the attempt was made under, so
an attempt whose lease was taken over cannot overwrite the newer state.
Signals are sent and retries published only after the batch commits.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.models import F
from django.utils import timezone

from django_outbox.backoff import Decision, held_until, next_attempt
from django_outbox.conf import conf
from django_outbox.dispatch import publish
from django_outbox.hosts import record_failures, record_successes
from django_outbox.models import LIVE_STATES, Delivery, DeliveryState, locked
from django_outbox.ordering import promote_successors
from django_outbox.outcomes import Kind, Outcome, server_failed
from django_outbox.signals import delivery_attempted, delivery_failed, delivery_settled, send_logged

logger = logging.getLogger("django_outbox.recorder")

_UNSPEND = F("attempts") - 1
_SETTLED = {
    Kind.DELIVERED: DeliveryState.DELIVERED,
    Kind.REFUSED: DeliveryState.REFUSED,
    Kind.SKIPPED: DeliveryState.SKIPPED,
}
_RELEASE: dict[str, Any] = {"claimed_by": "", "lease_until": None}
#: Outcomes of claims that sent nothing, whose attempt is given back.
_UNSPENT = (Kind.HELD, Kind.EXPIRED, Kind.RELEASED)


class _Effects:
    """The signals a batch of outcomes sends, and what to publish once it is saved."""

    def __init__(self) -> None:
        self.signals: list[tuple[Any, dict[str, Any]]] = []
        self.retries: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.finished: list[tuple[str, str]] = []

    def fail(self, row: Delivery) -> None:
        self.signals.append((delivery_failed, _failure_args(row)))
        self.finished.append((row.ordering_key, row.inbox))

    def send_signals(self) -> None:
        for signal, kwargs in self.signals:
            send_logged(signal, Delivery, **kwargs)

    def publish(self) -> None:
        for countdown, lanes in self.retries.items():
            publish({lane: ids for lane, ids in lanes.items()}, countdown or None)
        successors = promote_successors(self.finished)
        if successors:
            publish(successors)


def _common_args(row: Delivery) -> dict[str, Any]:
    return {"delivery": row, "inbox": row.inbox, "actor": row.message.sender}


def _failure_args(row: Delivery) -> dict[str, Any]:
    return {
        **_common_args(row),
        "status": row.last_status,
        "error": row.last_error,
        "tag": row.message.tag,
        "deadline": row.deadline_reached,
    }


def _fields_for(
    row: Delivery, outcome: Outcome, now: datetime, effects: _Effects
) -> dict[str, Any]:
    """The new field values of ``row`` after ``outcome``, noting signals and retries."""
    fields: dict[str, Any] = {"last_status": outcome.status, "last_error": outcome.error[:2000]}
    if outcome.kind in _SETTLED:
        fields.update(state=_SETTLED[outcome.kind], finished_at=now)
        if outcome.kind is Kind.SKIPPED:
            fields["attempts"] = _UNSPEND
        effects.finished.append((row.ordering_key, row.inbox))
    else:
        decision = _decide(row, outcome, now)
        if outcome.kind in _UNSPENT:
            fields["attempts"] = _UNSPEND
        if decision.retry_at is None:
            fields.update(
                state=DeliveryState.FAILED,
                finished_at=now,
                deadline_reached=decision.deadline,
                last_error=f"{decision.give_up}: {outcome.error}"[:2000]
                if outcome.error
                else decision.give_up,
            )
        else:
            wait = (decision.retry_at - now).total_seconds()
            parked = wait > conf.COUNTDOWN_LIMIT
            fields.update(
                state=DeliveryState.QUEUED,
                next_attempt_at=decision.retry_at,
                dispatched_at=None if parked else now,
            )
            if not parked:
                effects.retries[max(0, int(wait + 0.999))][row.lane].append(row.pk)
    fields.update(_RELEASE)
    return fields


def _decide(row: Delivery, outcome: Outcome, now: datetime) -> Decision:
    deadline = row.message.deadline
    if outcome.kind is Kind.EXPIRED:
        return Decision(None, "the batch's deadline passed before it was sent", True)
    if outcome.kind is Kind.HELD:
        return held_until(now, outcome.held_for or 0.0, deadline)
    if outcome.kind is Kind.RELEASED:
        return Decision(now)
    return next_attempt(
        now=now,
        attempts=row.attempts,
        max_attempts=row.message.max_attempts,
        deadline=deadline,
        asked=outcome.retry_after,
    )


def apply_outcomes(outcomes: list[Outcome]) -> _Effects:
    """Send the signals of ``outcomes``, then save them in one transaction.

    The signals go first, as the row is still claimed: a process that dies
    before saving leaves the delivery to be sent again, and its signals sent
    again, which is what makes them at least once.  Returns what to publish
    once the transaction has committed.
    """
    now = timezone.now()
    effects = _Effects()
    rows = Delivery.objects.select_related("message").defer(
        "message__body", "message__pending_inboxes"
    )
    by_id = {row.pk: row for row in rows.filter(id__in=[o.delivery_id for o in outcomes])}
    groups: dict[tuple[str, tuple[tuple[str, Any], ...]], list[int]] = defaultdict(list)
    succeeded: set[str] = set()
    failing: set[str] = set()
    for outcome in outcomes:
        row = by_id.get(outcome.delivery_id)
        if row is None or row.claimed_by != outcome.token or row.state != DeliveryState.SENDING:
            continue
        outcome = _unless_sender_gone(row, outcome)
        if outcome.kind is Kind.DELIVERED:
            succeeded.add(row.host)
        elif outcome.kind is Kind.RETRY and server_failed(outcome.status):
            failing.add(row.host)
        fields = _fields_for(row, outcome, now, effects)
        groups[(outcome.token, tuple(sorted(fields.items(), key=lambda i: i[0])))].append(row.pk)
        for name, value in fields.items():
            if name != "attempts":
                setattr(row, name, value)
        if fields.get("attempts") is _UNSPEND:
            row.attempts -= 1
        if outcome.kind is not Kind.RELEASED:
            attempt = {
                **_common_args(row),
                "status": outcome.status,
                "error": outcome.error,
                "held": outcome.kind is Kind.HELD,
                "outcome": outcome.kind.value,
            }
            effects.signals.append((delivery_attempted, attempt))
        if outcome.kind in _SETTLED:
            effects.signals.append(
                (
                    delivery_settled,
                    {
                        **_common_args(row),
                        "tag": row.message.tag,
                        "outcome": outcome.kind.value,
                        "status": outcome.status,
                    },
                )
            )
        if row.state in (DeliveryState.FAILED, DeliveryState.REFUSED):
            effects.fail(row)
    effects.send_signals()
    with transaction.atomic():
        for (token, items), ids in groups.items():
            Delivery.objects.filter(
                id__in=ids, claimed_by=token, state=DeliveryState.SENDING
            ).update(**dict(items))
        record_successes(succeeded)
        record_failures(failing - succeeded)
    return effects


def _unless_sender_gone(row: Delivery, outcome: Outcome) -> Outcome:
    """``outcome`` as a refusal when its status is one after which the sender may be
    gone for good (``OUTBOX_SENDER_GONE_STATUSES``) and the key resolver says it is."""
    if outcome.kind is not Kind.RETRY or outcome.status not in conf.SENDER_GONE_STATUSES:
        return outcome
    gone = getattr(conf.KEY_RESOLVER, "gone", None)
    if gone is None or not gone(row.message.sender):
        return outcome
    return replace(outcome, kind=Kind.REFUSED, error=f"{outcome.error}; the sender is gone")


def give_up_rows(ids: Iterable[int], reason: str, *, deadline: bool = False) -> int:
    """Fail the live deliveries among ``ids`` now, sending ``delivery_failed`` for each."""
    now = timezone.now()
    effects = _Effects()
    with transaction.atomic():
        rows = list(
            locked(Delivery.objects.filter(id__in=list(ids), state__in=LIVE_STATES))
            .select_related("message")
            .defer("message__body", "message__pending_inboxes")
        )
        changed = Delivery.objects.filter(
            id__in=[row.pk for row in rows], state__in=LIVE_STATES
        ).update(
            state=DeliveryState.FAILED,
            last_error=reason,
            deadline_reached=deadline,
            finished_at=now,
            **_RELEASE,
        )
    for row in rows:
        row.state, row.last_error, row.deadline_reached = DeliveryState.FAILED, reason, deadline
        row.finished_at = now
        effects.fail(row)
    effects.send_signals()
    effects.publish()
    return changed


class Recorder:
    """The per-process writer thread that :func:`apply_outcomes` runs on."""

    BATCH = 500

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self._pending = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="outbox-recorder", daemon=True)
        self._thread.start()

    def put(self, outcome: Outcome) -> None:
        """Queue ``outcome`` to be saved."""
        with self._idle:
            self._pending += 1
        self._queue.put(outcome)

    def flush(self, timeout: float) -> bool:
        """Wait until every queued outcome is saved; False if ``timeout`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _loop(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self.BATCH:
                try:
                    batch.append(self._queue.get(timeout=0.002))
                except queue.Empty:
                    break
            self._save(batch)
            with self._idle:
                self._pending -= len(batch)
                self._idle.notify_all()

    def _save(self, batch: list[Outcome]) -> None:
        pause = 0.5
        while True:
            try:
                effects = apply_outcomes(batch)
                break
            except DatabaseError:
                # The database is away: keep the outcomes and try again.  If
                # the process dies meanwhile, the leases lapse and the sweeper
                # sends those deliveries again (at least once).
                logger.warning("could not save %d outcomes; retrying", len(batch), exc_info=True)
                connections.close_all()
                time.sleep(pause)
                pause = min(pause * 2, 10.0)
        try:
            effects.publish()
        except Exception:
            logger.exception("could not publish retries or successors after saving outcomes")

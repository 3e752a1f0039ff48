"""Saving what came of attempts: row updates, retries, signals, successors.

The delivery threads never touch the database.  They hand each
:class:`~django_outbox.outcomes.Outcome` to the process's :class:`Recorder`,
whose one thread gathers them for up to :attr:`Recorder.WINDOW` and saves them
in batches, on one connection, each update conditional on the claim still
being the one the attempt was made under, so an attempt whose lease was taken
over cannot overwrite the newer state.  Signals are sent before the batch is
saved (at least once, see ``signals.py``); retries and successors are
published after it commits.
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

from django_outbox._claimed_rows import ClaimedRow, read_rows
from django_outbox._grouped_updates import GroupedUpdates
from django_outbox._signal_args import AttemptSignals, failure_args
from django_outbox.backoff import Decision, held_until, next_attempt
from django_outbox.conf import conf
from django_outbox.dispatch import publish
from django_outbox.hosts import record_failures, record_successes
from django_outbox.models import LIVE_STATES, Delivery, DeliveryState, locked
from django_outbox.ordering import promote_successors
from django_outbox.outcomes import Kind, Outcome, server_failed
from django_outbox.signals import delivery_failed, send_logged

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
        self.signals = AttemptSignals()
        self.retries: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.finished: list[tuple[str, str]] = []

    def publish(self) -> None:
        """Publish the retries due soon and queue the successors of finished deliveries."""
        for countdown, lanes in self.retries.items():
            publish({lane: ids for lane, ids in lanes.items()}, countdown or None)
        successors = promote_successors(self.finished)
        if successors:
            publish(successors)


def _fields_for(
    row: ClaimedRow, outcome: Outcome, now: datetime, effects: _Effects
) -> dict[str, Any]:
    """The new field values of ``row`` after ``outcome``, noting retries and successors."""
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
            effects.finished.append((row.ordering_key, row.inbox))
        else:
            wait = (decision.retry_at - now).total_seconds()
            parked = wait > conf.COUNTDOWN_LIMIT
            fields.update(
                state=DeliveryState.QUEUED,
                next_attempt_at=decision.retry_at,
                dispatched_at=None if parked else now,
            )
            if not parked:
                effects.retries[max(0, int(wait + 0.999))][row.lane].append(row.id)
    fields.update(_RELEASE)
    return fields


def _decide(row: ClaimedRow, outcome: Outcome, now: datetime) -> Decision:
    if outcome.kind is Kind.EXPIRED:
        return Decision(None, "the batch's deadline passed before it was sent", True)
    if outcome.kind is Kind.HELD:
        return held_until(now, outcome.held_for or 0.0, row.deadline)
    if outcome.kind is Kind.RELEASED:
        return Decision(now)
    return next_attempt(
        now=now,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        deadline=row.deadline,
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
    rows = read_rows([o.delivery_id for o in outcomes], effects.signals)
    updates = GroupedUpdates()
    done: set[int] = set()
    succeeded: set[str] = set()
    recovered: set[str] = set()
    failing: set[str] = set()
    for outcome in outcomes:
        row = rows.get(outcome.delivery_id)
        if (
            row is None
            or row.id in done
            or row.claimed_by != outcome.token
            or row.state != DeliveryState.SENDING
        ):
            continue
        done.add(row.id)
        outcome = _unless_sender_gone(row, outcome)
        if outcome.kind is Kind.DELIVERED:
            succeeded.add(row.host)
            if row.failing:
                recovered.add(row.host)
        elif outcome.kind is Kind.RETRY and server_failed(outcome.status):
            failing.add(row.host)
        fields = _fields_for(row, outcome, now, effects)
        updates.add(outcome.token, row.id, fields)
        effects.signals.note(row.id, outcome, fields, unspent=fields.get("attempts") is _UNSPEND)
    effects.signals.send()
    with transaction.atomic():
        updates.save()
        # Only hosts that had a Host row when the batch was read: a row another
        # process writes after that is a failure seen after this success.
        record_successes(recovered)
        record_failures(failing - succeeded)
    return effects


def _unless_sender_gone(row: ClaimedRow, outcome: Outcome) -> Outcome:
    """``outcome`` as a refusal when its status is one after which the sender may be
    gone for good (``OUTBOX_SENDER_GONE_STATUSES``) and the key resolver says it is."""
    if outcome.kind is not Kind.RETRY or outcome.status not in conf.SENDER_GONE_STATUSES:
        return outcome
    gone = getattr(conf.KEY_RESOLVER, "gone", None)
    if gone is None or not gone(row.sender):
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
        effects.finished.append((row.ordering_key, row.inbox))
        send_logged(delivery_failed, Delivery, **failure_args(row))
    effects.publish()
    return changed


class Recorder:
    """The per-process writer thread that :func:`apply_outcomes` runs on.

    Saving costs far less per outcome in a big batch than in a small one, so
    the thread gathers what the delivery threads hand it for up to
    :attr:`WINDOW` seconds after the first outcome of a batch (or until
    :attr:`BATCH` of them), then saves them together.  :meth:`flush` cuts the
    window short.
    """

    #: The most outcomes saved in one batch.
    BATCH = 500
    #: Seconds a batch waits for more outcomes after its first.
    WINDOW = 0.05

    def __init__(self) -> None:
        # None is no outcome: flush() puts it to wake a gathering thread.
        self._queue: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._pending = 0
        self._flushing = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="outbox-recorder", daemon=True)
        self._thread.start()

    def put(self, outcome: Outcome) -> None:
        """Queue ``outcome`` to be saved."""
        with self._idle:
            self._pending += 1
        self._queue.put(outcome)

    def flush(self, timeout: float) -> bool:
        """Wait until every queued outcome is saved; False if ``timeout`` passed first.

        While it waits, batches are saved without waiting for more outcomes.
        """
        with self._idle:
            if self._pending == 0:
                return True
            self._flushing += 1
        try:
            self._queue.put(None)
            with self._idle:
                return self._idle.wait_for(lambda: self._pending == 0, timeout)
        finally:
            with self._idle:
                self._flushing -= 1

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                continue
            batch = self._gather(first)
            self._save(batch)
            with self._idle:
                self._pending -= len(batch)
                self._idle.notify_all()

    def _gather(self, first: Outcome) -> list[Outcome]:
        """``first`` and what else comes within the window, or is already queued."""
        batch = [first]
        until = time.monotonic() + self.WINDOW
        while len(batch) < self.BATCH:
            left = 0.0 if self._flushing else until - time.monotonic()
            try:
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                until = 0.0  # a flush: take only what is already queued
            else:
                batch.append(item)
        return batch

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

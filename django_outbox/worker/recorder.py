"""Saving what came of attempts: the recorder thread of a worker process.

The sending threads never touch the database.  They hand each
:class:`~django_outbox.outcomes.Outcome` to the process's :class:`Recorder`,
whose one thread gathers them for up to :attr:`Recorder.WINDOW` and saves them
in batches, on one connection, through :mod:`django_outbox.store.transitions`
(each update conditional on the claim the attempt was made under).  Signals
are sent before the batch is saved (at least once, see ``signals.py``);
retries and successors are published after it commits.  Deliveries held while
their host is paid are parked instead, as a claim parks them (no outcome saved).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from django.db import DatabaseError, connections
from django.utils import timezone

from django_outbox.backoff import held_until
from django_outbox.conf import conf
from django_outbox.dispatch import publish
from django_outbox.metrics.recording import record_batch
from django_outbox.models import Signing
from django_outbox.notify import AttemptSignals
from django_outbox.outcomes import AttemptResult, Outcome
from django_outbox.payments.ledger import record_payments
from django_outbox.payments.reports import PARKED_HOLDS
from django_outbox.signing.schemes import share_learnt
from django_outbox.store.claimed import ClaimedRow
from django_outbox.store.transitions import (
    OutcomePlan,
    park,
    plan_outcomes,
    promote_successors,
    save_outcomes,
)

logger = logging.getLogger("django_outbox.recorder")


def apply_outcomes(outcomes: Sequence[Outcome]) -> OutcomePlan:
    """Send the signals of ``outcomes``, then save them in one transaction.

    The signals go first, as the rows are still claimed: a process that dies
    before saving leaves the deliveries to be sent again, and their signals
    sent again, which is what makes them at least once.  Payment reports are
    written before either (:func:`~django_outbox.payments.ledger.record_payments`),
    and may turn an outcome into a hold or a refusal; the holds while a host is paid
    are then parked (:func:`park_payment_holds`).  Returns the plan, whose
    retries and successors :func:`publish_effects` publishes once it is saved.
    What was saved is counted for the metrics.  The signature schemes hosts accepted
    are told to the shared cache first (:func:`~django_outbox.signing.schemes.share_learnt`),
    so that a delivery seen settled has its host's scheme known to every worker.
    """
    share_learnt()
    outcomes = [_unless_sender_gone(outcome) for outcome in outcomes]
    payments = conf.PAYMENTS
    if payments is not None:
        # Committed first: what was paid is kept even if the claim was lost meanwhile.
        outcomes = park_payment_holds(record_payments(outcomes, payments))
    plan = plan_outcomes(outcomes)
    signals = AttemptSignals()
    for outcome, fields in plan.decided:
        signals.note(outcome, fields)
    signals.send()
    save_outcomes(plan)
    record_batch(outcomes, plan.decided)
    return plan


def park_payment_holds(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """``outcomes`` but those held while their host is paid, which are parked until their
    hold ends, in one statement per reason: no history row, no signal, no message (a
    hold is not an attempt).  A hold that would end past its batch's deadline stays, to
    fail the delivery.  The claim calls it for the deliveries it holds, the recorder
    for the holds met after the claim."""
    now = timezone.now()
    parked: dict[str, list[tuple[ClaimedRow, datetime]]] = {}
    kept: list[Outcome] = []
    for outcome in outcomes:
        if outcome.result is AttemptResult.HELD and outcome.error in PARKED_HOLDS:
            due = held_until(now, outcome.held_for or 0.0, outcome.message.deadline).retry_at
            if due is not None:
                parked.setdefault(outcome.error, []).append((outcome.row, due))
                continue
        kept.append(outcome)
    for error, rows in parked.items():
        park(rows, error)
    return kept


def publish_effects(plan: OutcomePlan) -> None:
    """Publish the retries due soon and queue the successors of finished deliveries."""
    for countdown, lanes in plan.retries.items():
        publish(lanes, countdown or None)
    publish(promote_successors(plan.finished))


def _unless_sender_gone(outcome: Outcome) -> Outcome:
    """``outcome`` as a refusal when its status is one after which the sender may be
    gone for good (``OUTBOX_SENDER_GONE_STATUSES``) and the key resolver says it is.

    Webhooks are left as they are: their senders are not actors the key resolver knows.
    """
    if outcome.result is not AttemptResult.RETRY:
        return outcome
    if outcome.message.signing != Signing.HTTP_SIGNATURES:
        return outcome
    if outcome.status not in conf.SENDER_GONE_STATUSES:
        return outcome
    gone = conf.SENDER_GONE
    if gone is None or not gone(outcome.message.sender):
        return outcome
    error = f"{outcome.error}; the sender is gone"
    return replace(outcome, result=AttemptResult.REFUSED, error=error)


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
                plan = apply_outcomes(batch)
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
            publish_effects(plan)
        except Exception:
            logger.exception("could not publish retries or successors after saving outcomes")

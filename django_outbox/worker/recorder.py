"""Saving what came of attempts: the recorder thread of a worker process.

The sending loops never touch the database (a payment thread stores only the new
payment attempt it is about to pay, see :mod:`~django_outbox.payments.settling`).  They
hand each :class:`~django_outbox.values.outcomes.Outcome` to the process's :class:`Recorder`,
whose one thread gathers them for up to :attr:`Recorder.WINDOW` and saves them
in batches, on one connection, through :mod:`django_outbox.store.transitions`
(each update conditional on the claim the attempt was made under).  Signals
are sent before the batch is saved (at least once, see ``signals.py``);
retries and successors are published after it commits.  The active extensions
record their part first (:meth:`~django_outbox.extensions.Extension.record`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple, TypeVar

from django.db import connections

from django_outbox.broker.publish import publish
from django_outbox.conf import conf
from django_outbox.counters.recording import record_batch
from django_outbox.extensions.registry import active
from django_outbox.models import Signing
from django_outbox.signals.sending import AttemptSignals
from django_outbox.signing.schemes import share_learnt
from django_outbox.store.holds import release_held
from django_outbox.store.outages import DATABASE_OUTAGES
from django_outbox.store.transitions import (
    OutcomePlan,
    plan_outcomes,
    promote_successors,
    release_claim,
    save_outcomes,
)
from django_outbox.values.outcomes import AttemptResult, Outcome, internal_error
from django_outbox.worker.callbacks import call_each
from django_outbox.worker.supervisor import Part

logger = logging.getLogger("django_outbox.recorder")

T = TypeVar("T")
R = TypeVar("R")


def apply_outcomes(outcomes: Sequence[Outcome]) -> OutcomePlan:
    """Send the signals of ``outcomes``, then save them in one transaction.

    The signals go first, as the rows are still claimed: a process that dies
    before saving leaves the deliveries to be sent again, and their signals
    sent again, which is what makes them at least once.  The active extensions record
    their reports before either (:meth:`~django_outbox.extensions.Extension.record`),
    and may turn an outcome into a hold or a refusal.  Returns the plan, whose
    retries and successors :func:`publish_effects` publishes once it is saved.
    What was saved is counted for the metrics.  The signature schemes hosts accepted
    are told to the shared cache first (:func:`~django_outbox.signing.schemes.share_learnt`),
    so that a delivery seen settled has its host's scheme known to every worker.
    """
    share_learnt()
    outcomes = _unless_senders_gone(outcomes)
    for extension in active():
        outcomes = extension.record(outcomes)
    plan = plan_outcomes(outcomes)
    signals = AttemptSignals()
    for outcome, fields in plan.decided:
        signals.note(outcome, fields)
    signals.send()
    save_outcomes(plan)
    record_batch(outcomes, plan.decided)
    return plan


def publish_effects(plan: OutcomePlan) -> None:
    """Publish the retries due soon, queue the successors of finished deliveries, and
    release some of the deliveries held for the hosts that outcomes freed."""
    for countdown, lanes in plan.retries.items():
        publish(lanes, countdown or None)
    publish(promote_successors(plan.finished))
    freed = [host for outcome, _ in plan.decided for host in outcome.released]
    if freed:
        released = release_held(freed, conf.BREAKER_THRESHOLD, conf.RELEASE_STEP)
        for spread, lanes in released.items():
            publish(lanes, spread or None)


def _unless_senders_gone(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """``outcomes``, each a refusal when its status is one after which the sender may be
    gone for good (``OUTBOX_SENDER_GONE_STATUSES``) and ``OUTBOX_SENDER_GONE`` says it is.

    The check is the application's function: asked once per sender, bounded in time
    (:func:`~django_outbox.worker.callbacks.call_each`); one that raises or does not
    answer leaves the outcome a retry, noted in its error.  Webhooks are left as they
    are: their senders are not actors the key resolver knows.
    """
    gone = conf.SENDER_GONE
    asked = [i for i, outcome in enumerate(outcomes) if _may_be_gone(outcome)]
    if gone is None or not asked:
        return list(outcomes)
    senders = {outcomes[i].message.sender for i in asked}
    answers = call_each(gone, ((sender, (sender,)) for sender in senders), "OUTBOX_SENDER_GONE")
    checked = list(outcomes)
    for i in asked:
        outcome = checked[i]
        answer = answers[outcome.message.sender]
        if isinstance(answer, Exception):
            logger.warning("OUTBOX_SENDER_GONE failed for delivery %s: %r", outcome.row.id, answer)
            error = f"{outcome.error}; internal: the sender-gone check failed: {answer}"
            checked[i] = replace(outcome, error=error)
        elif answer:
            error = f"{outcome.error}; the sender is gone"
            checked[i] = replace(outcome, result=AttemptResult.REFUSED, error=error)
    return checked


def _may_be_gone(outcome: Outcome) -> bool:
    return (
        outcome.result is AttemptResult.RETRY
        and outcome.message.signing == Signing.HTTP_SIGNATURES
        and outcome.status in conf.SENDER_GONE_STATUSES
    )


class Release(NamedTuple):
    """Deliveries to give back unsent, named by id and claim token: a claim whose rows
    could not be prepared (the database went away meanwhile), or whose answer was lost."""

    ids: tuple[int, ...]
    token: str
    #: Seconds before they may be claimed again (parked until then), or 0: at once.
    after: float = 0.0
    #: Why, for their ``last_error``; or ``""``, which leaves it as it was.
    error: str = ""


class Recorder:
    """The per-process writer thread that :func:`apply_outcomes` runs on.

    Saving costs far less per outcome in a big batch than in a small one, so
    the thread gathers what the delivery threads hand it for up to
    :attr:`WINDOW` seconds after the first outcome of a batch (or until
    :attr:`BATCH` of them), then saves them together.  :meth:`flush` cuts the
    window short.

    While the database is away a batch is tried again until it answers.  Any other
    exception is logged with the deliveries involved and the batch is saved one outcome
    at a time; an outcome that still cannot be saved is replaced by an internal error
    (a retry, visible on its row), and one that cannot be saved even so makes the
    process unfit (``unfit``): the thread itself goes on.  Each save is a step of
    :attr:`part`, which the supervisor watches.
    """

    #: The most outcomes saved in one batch.
    BATCH = 500
    #: Seconds a batch waits for more outcomes after its first.
    WINDOW = 0.05

    def __init__(self, unfit: Callable[[str], None] | None = None) -> None:
        # None is no outcome: flush() puts it to wake a gathering thread.
        self._queue: queue.SimpleQueue[Outcome | Release | None] = queue.SimpleQueue()
        self._pending = 0
        self._flushing = 0
        self._idle = threading.Condition()
        self._unfit = unfit
        #: The batch being saved, for :meth:`abandon`.
        self._current: list[Outcome | Release] = []
        self._thread = threading.Thread(target=self._loop, name="outbox-recorder", daemon=True)
        self.part = Part("recorder", conf.STALL_TIMEOUT, threads=lambda: (self._thread,))
        self._thread.start()

    def put(self, item: Outcome | Release) -> None:
        """Queue an outcome to be saved, or claimed rows to be given back."""
        with self._idle:
            self._pending += 1
        self._queue.put(item)

    def backlog(self) -> int:
        """Outcomes and releases queued or being saved."""
        with self._idle:
            return self._pending

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

    def abandon(self) -> list[Outcome | Release]:
        """What is queued or being saved, taken out of the queue: for an unfit process
        to give back (a conditional release cannot undo a save that wins the race)."""
        taken = list(self._current)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return taken
            if item is not None:
                taken.append(item)
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def save_here(self, batch: list[Outcome | Release]) -> None:
        """Save ``batch`` on the calling thread: what :meth:`abandon` took from a recorder
        whose own thread is stuck.  Outcomes already known are saved rather than given
        back, so that an inbox that accepted is not sent the activity again, nor a paid
        token presented twice.  Raises what the save raises (the caller gives back)."""
        self._save(batch)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                continue
            batch = self._gather(first)
            self._current = batch
            try:
                self._save(batch)
            except Exception as error:  # a fault of the fallbacks themselves
                logger.exception("the recorder could not save a batch")
                self._fail(f"the recorder could not save a batch: {error!r}")
            finally:
                self._current = []
                with self._idle:
                    self._pending -= len(batch)
                    self._idle.notify_all()

    def _gather(self, first: Outcome | Release) -> list[Outcome | Release]:
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

    def _save(self, batch: list[Outcome | Release]) -> None:
        for item in batch:
            if isinstance(item, Release):
                lanes = self._persist("giving back claimed deliveries", release_claim, item)
                publish(lanes)
        outcomes = [item for item in batch if isinstance(item, Outcome)]
        for plan in self._record(outcomes) if outcomes else []:
            try:
                publish_effects(plan)
            except Exception:
                logger.exception("could not publish retries or successors after saving outcomes")

    def _record(self, outcomes: list[Outcome]) -> list[OutcomePlan]:
        """Save ``outcomes`` together, or else one at a time; the plans saved."""
        try:
            return [self._persist(f"saving {len(outcomes)} outcomes", apply_outcomes, outcomes)]
        except Exception:
            logger.exception(
                "could not save the outcomes of deliveries %s; saving them one at a time",
                _ids(outcomes),
            )
        plans = (self._record_alone(outcome) for outcome in outcomes)
        return [plan for plan in plans if plan is not None]

    def _record_alone(self, outcome: Outcome) -> OutcomePlan | None:
        """Save ``outcome``, or an internal error in its place; None if neither saves."""
        doing = f"saving the outcome of delivery {outcome.row.id}"
        try:
            return self._persist(doing, apply_outcomes, [outcome])
        except Exception as error:
            logger.exception("could not save the outcome of delivery %s", outcome.row.id)
            failed = internal_error(
                outcome.row, outcome.message, "its outcome could not be saved", error
            )
        try:
            return self._persist(doing, apply_outcomes, [failed])
        except Exception as error:
            logger.exception("could not save an internal error for delivery %s", outcome.row.id)
            self._fail(f"the recorder cannot save delivery {outcome.row.id}: {error!r}")
            return None

    def _persist(self, doing: str, save: Callable[[T], R], argument: T) -> R:
        """``save(argument)``, tried again while the database is away (not counted as
        stuck: each try is a step of its own); what else it raises, raised."""
        pause = 0.5
        while True:
            with self.part.step(doing):
                try:
                    return save(argument)
                except DATABASE_OUTAGES:
                    # The database is away: keep the outcomes and try again.  If the
                    # process dies meanwhile, its claims are taken back (at least once).
                    logger.warning("%s: the database is away; retrying", doing, exc_info=True)
                    connections.close_all()
            time.sleep(pause)
            pause = min(pause * 2, 10.0)

    def _fail(self, reason: str) -> None:
        if self._unfit is not None:
            self._unfit(reason)


def _ids(outcomes: Sequence[Outcome]) -> str:
    """The delivery ids of ``outcomes`` for a log line (the first 50)."""
    ids = [str(outcome.row.id) for outcome in outcomes]
    return ", ".join(ids[:50]) + (f" and {len(ids) - 50} more" if len(ids) > 50 else "")

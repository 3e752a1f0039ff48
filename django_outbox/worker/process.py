"""What one worker process keeps between tasks, and the task's half of sending.

A pool process makes its :class:`~django_outbox.worker.engine.Engine` (an event loop
in a thread), its recorder thread, its HTTP transport and its breaker store as it
starts; they live until the process stops, each a part its
:class:`~django_outbox.worker.supervisor.Supervisor` watches.  A task claims its rows,
loads the message bodies (cached: they never change), asks the application for signing
keys, webhook secrets and synchronisation headers (cached for a while where they may
be; bounded in time, :mod:`~django_outbox.worker.callbacks`) and hands the deliveries
to the engine (:mod:`~django_outbox.worker.preparing` turns rows into jobs).  Secrets
are resolved here, in the task's thread, because the sending coroutines never touch
the database; they travel in the :class:`~django_outbox.worker.attempt.Job`, in
memory, never in a Celery message or a row.

Whatever a task claims is handed over, given an outcome, or given back on every path:
an exception while its rows are prepared gives each an internal error (or, the
database being away, gives them back through the recorder, which waits for it), and a
task stuck preparing them makes the process unfit, which hands them back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from django_outbox.breakers.configured import (
    configured_policy,
    configured_rate_store,
    configured_store,
)
from django_outbox.broker.publish import publish
from django_outbox.conf import conf
from django_outbox.counters.recording import stop_recording, watch_engine
from django_outbox.exceptions import OutboxError
from django_outbox.models import Lane, Signing
from django_outbox.sending.keys import SenderKey
from django_outbox.signing.schemes import recall
from django_outbox.signing.webhooks import WebhookKeys
from django_outbox.store.claim_rows import load_messages
from django_outbox.store.outages import DATABASE_OUTAGES
from django_outbox.store.transitions import release, release_claim
from django_outbox.transport import Transport
from django_outbox.transport.loops import loop_factory
from django_outbox.upkeep.pauses import ended_pauses
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptResult, Outcome, internal_error
from django_outbox.worker import pacing
from django_outbox.worker.attempt import Job, first_origins, perform
from django_outbox.worker.callbacks import Remembered, call_each
from django_outbox.worker.engine import Engine
from django_outbox.worker.preparing import (
    AskedAnswers,
    needs_synchronization,
    prepare_jobs,
    resolve_webhook_keys,
)
from django_outbox.worker.recorder import Recorder, Release
from django_outbox.worker.supervisor import Part, Supervisor, this_supervisor

logger = logging.getLogger("django_outbox.worker")

_KEY_TTL = 300.0
#: Seconds a webhook endpoint's secrets are reused: short, so that a rotation
#: (or a secret removed once receivers use the new one) is seen within a minute.
_WEBHOOK_KEYS_TTL = 60.0
_MESSAGES_KEPT = 256
#: Seconds before deliveries whose claim could not be prepared are claimed again, when
#: the cause is not the database being away (which they wait out in the recorder).
_PREPARE_RETRY = 5.0


class ProcessUnfit(OutboxError):
    """This worker process cannot go on (a part of it died or is stuck): it claims
    nothing more, and the task's message goes back to the queue for another."""


class WorkerProcess:
    """The engine, recorder, transport, breakers and caches of one process, each
    supervised part registered with ``supervisor`` (the process's own by default)."""

    def __init__(self, supervisor: Supervisor | None = None) -> None:
        self.pid = os.getpid()
        self.supervisor = supervisor or this_supervisor()
        self.recorder = Recorder(unfit=self.supervisor.fail)
        self.transport = Transport(
            user_agent=conf.USER_AGENT,
            connect_timeout=conf.CONNECT_TIMEOUT,
            total_timeout=conf.TOTAL_TIMEOUT,
            read_timeout=conf.READ_TIMEOUT,
            max_response_bytes=conf.MAX_RESPONSE_BYTES,
            allowed_networks=conf.ALLOWED_NETWORKS,
            ca_bundle=conf.CA_BUNDLE,
        )
        self.breakers = configured_store()
        self.policy = configured_policy()
        self.rates = configured_rate_store()
        stall = conf.STALL_TIMEOUT
        loops = (
            Part("urgent event loop", stall, threads=lambda: self.engine.threads[:1]),
            Part("event loop", stall, threads=lambda: self.engine.threads[1:]),
        )
        #: The Celery task thread between a claim and the hand-over of its rows.
        self.tasks = Part("task", stall)
        self.engine: Engine[Job] = Engine(
            self._send,
            host_of=lambda job: None if job.urgent else job.row.host,
            urgent=lambda job: job.urgent or job.row.lane == Lane.PRIORITY,
            concurrency=conf.CONCURRENCY,
            per_host=conf.PER_HOST,
            host_cap=pacing.ramped_caps(self.rates, conf.PER_HOST),
            max_in_flight=conf.MAX_IN_FLIGHT,
            on_turn=lambda lane: loops[lane].tick(),
            new_loop=loop_factory(conf.EVENT_LOOP),
        )
        for part in (*loops, self.tasks, self.recorder.part):
            self.supervisor.add(part)
        watch_engine(self.engine.usage)
        self._messages: OrderedDict[int, MessageData] = OrderedDict()
        self._keys: Remembered[str, SenderKey | None] = Remembered(
            "OUTBOX_KEY_RESOLVER", lambda sender: conf.KEY_RESOLVER(sender), _KEY_TTL
        )
        self._webhook_keys: Remembered[tuple[str, str], WebhookKeys | None] = Remembered(
            "OUTBOX_WEBHOOK_SECRET_RESOLVER", resolve_webhook_keys, _WEBHOOK_KEYS_TTL
        )
        self._lock = threading.Lock()

    async def _send(self, job: Job) -> None:
        if time.monotonic() > job.send_by:
            # It waited so long behind its host that its lease could lapse
            # while it is sent: give it back rather than risk a double send.
            error = "released: waited too long behind its host for the lease"
            self.recorder.put(job.outcome(AttemptResult.RELEASED, error=error))
            return
        ends = None if math.isinf(job.finish_by) else job.finish_by
        try:
            async with asyncio.timeout_at(ends):
                outcome = await perform(job, self.transport, self.breakers, self.policy, self.rates)
        except TimeoutError:
            reason = "it did not end before its lease would lapse"
            outcome = internal_error(job.row, job.message, "the attempt", reason)
        except Exception as error:
            logger.exception("delivery %s failed unexpectedly", job.row.id)
            outcome = internal_error(job.row, job.message, "the attempt", error)
        self.recorder.put(outcome)

    def messages(self, ids: Iterable[int]) -> dict[int, MessageData]:
        """The messages with ``ids``, from memory or one query."""
        wanted = set(ids)
        found = self.kept_messages(wanted)
        missing = wanted - found.keys()
        if missing:
            found.update(load_messages(missing))
            with self._lock:
                for data in found.values():
                    self._messages[data.id] = data
                while len(self._messages) > _MESSAGES_KEPT:
                    self._messages.popitem(last=False)
        return found

    def kept_messages(self, ids: Iterable[int]) -> dict[int, MessageData]:
        """Those of the messages with ``ids`` that this process keeps (no query)."""
        with self._lock:
            return {i: self._messages[i] for i in ids if i in self._messages}

    def key_for(self, sender: str) -> SenderKey | None:
        """The sender's signing key, asking the resolver at most every few minutes."""
        return self._keys.one(sender, sender)

    def webhook_keys_for(self, sender: str, endpoint: str) -> WebhookKeys | None:
        """The endpoint's webhook secrets, asking the resolver at most once a minute.

        Raises :class:`~django_outbox.signing.webhooks.InvalidWebhookSecret` (not
        cached) when the resolver's answer does not parse.
        """
        return self._webhook_keys.one((sender, endpoint), sender, endpoint)

    def answers_for(
        self, claimed: Sequence[ClaimedRow], messages: Mapping[int, MessageData]
    ) -> AskedAnswers:
        """What the application's functions say of ``claimed``, asked concurrently and
        bounded in time (keys and secrets from memory where this process has them)."""
        senders: dict[str, tuple[object, ...]] = {}
        endpoints: dict[tuple[str, str], tuple[object, ...]] = {}
        synchronized: dict[tuple[str, str], tuple[object, ...]] = {}
        for row in claimed:
            message = messages[row.message_id]
            pair = (message.sender, row.inbox)
            if message.signing == Signing.STANDARD_WEBHOOKS:
                endpoints[pair] = pair
            else:
                senders[message.sender] = (message.sender,)
            if needs_synchronization(message):
                synchronized[pair] = pair
        write = conf.COLLECTION_SYNCHRONIZATION
        headers = (
            call_each(write, synchronized.items(), "OUTBOX_COLLECTION_SYNCHRONIZATION")
            if write is not None and synchronized
            else {}
        )
        return AskedAnswers(
            self._keys.answers(senders), self._webhook_keys.answers(endpoints), headers
        )

    def jobs_for(self, claimed: list[ClaimedRow]) -> list[Job]:
        """The jobs to send for ``claimed``; those not to send go to the recorder at once.

        The schemes their origins accepted are read from the shared cache here, in
        one round trip for the claim, rather than by each first contact on the loop.
        """
        messages = self.messages(row.message_id for row in claimed)
        answers = self.answers_for(claimed, messages)
        jobs = prepare_jobs(claimed, messages, answers, self.recorder.put)
        pacing.start_after_pauses(self.rates, ended_pauses())
        recall(first_origins(jobs))
        return jobs

    def prepared(self, claimed: list[ClaimedRow]) -> list[Job]:
        """:meth:`jobs_for`, as a supervised step that gives every row an outcome when
        it raises: an internal error (retried soon), or, with the database away or the
        message unknown, given back through the recorder (after a while, unless the
        database was away)."""
        with self.tasks.step(f"preparing {len(claimed)} claimed deliveries", claimed):
            try:
                return self.jobs_for(claimed)
            except Exception as error:
                logger.exception(
                    "could not prepare claimed deliveries %s", ", ".join(str(r.id) for r in claimed)
                )
                self._salvage(claimed, error)
                return []

    def _salvage(self, claimed: list[ClaimedRow], error: Exception) -> None:
        outage = isinstance(error, DATABASE_OUTAGES)
        messages = {} if outage else self._messages_if_possible(row.message_id for row in claimed)
        back: dict[str, list[int]] = {}
        for row in claimed:
            message = messages.get(row.message_id)
            if message is None:
                back.setdefault(row.token, []).append(row.id)
            else:
                self.recorder.put(internal_error(row, message, "preparing the claim", error))
        note = f"internal: preparing the claim: {type(error).__name__}: {error}"
        for token, ids in back.items():
            self.recorder.put(Release(tuple(ids), token, 0.0 if outage else _PREPARE_RETRY, note))

    def _messages_if_possible(self, ids: Iterable[int]) -> dict[int, MessageData]:
        wanted = set(ids)
        try:
            return self.messages(wanted)
        except Exception:
            return self.kept_messages(wanted)

    def stop(self, timeout: float, *, recorder_works: bool = True) -> None:
        """Release what never started at once; give what runs ``timeout`` to finish.

        Deliveries still running after that are released too, so that another
        worker sends them now rather than after the lease; if the inbox had in
        fact received one, it receives it twice (at least once).  An unfit process
        whose recorder does not work saves what its recorder held on this thread
        instead, the outcomes of what finished within ``timeout`` included (given
        back if that fails too).
        """
        give_back([job.row for job in self.engine.stop()])
        deadline = time.monotonic() + timeout
        running = self.engine.join(timeout)
        if recorder_works:
            if not self.recorder.flush(max(0.1, deadline - time.monotonic())):
                logger.warning("stopped before every outcome was saved; their leases will lapse")
        else:
            self._save_unsaved(self.recorder.abandon())
        give_back([job.row for job in running])
        stop_recording()

    def _save_unsaved(self, unsaved: list[Outcome | Release]) -> None:
        """Save on this thread what the stuck recorder held (a fresh connection: the
        stuck step keeps its own); given back, to be sent again, if that fails too."""
        try:
            self.recorder.save_here(unsaved)
            return
        except Exception:
            logger.exception("could not save what the stuck recorder held; giving it back")
        give_back([item.row for item in unsaved if isinstance(item, Outcome)])
        for item in unsaved:
            if isinstance(item, Release):
                publish(release_claim(item))


_process: WorkerProcess | None = None
_process_lock = threading.Lock()


def this_process() -> WorkerProcess:
    """This process's :class:`WorkerProcess`, started on first use (and after a fork)."""
    global _process
    with _process_lock:
        if _process is None or _process.pid != os.getpid():
            _process = WorkerProcess()
        return _process


def current_process() -> WorkerProcess | None:
    """This process's :class:`WorkerProcess` if it has one, without starting one."""
    process = _process
    return process if process is not None and process.pid == os.getpid() else None


def stop_this_process(timeout: float) -> None:
    """Stop this process's engine, if it has one (warm shutdown)."""
    global _process
    with _process_lock:
        process, _process = _process, None
    if process is not None and process.pid == os.getpid():
        process.stop(timeout)


def give_back(rows: Sequence[ClaimedRow]) -> None:
    """Release claimed deliveries unsent, their attempt refunded, and publish them again."""
    if rows:
        publish(release(rows))

"""What one worker process keeps between tasks, and the task-side half of sending.

The first ``deliver`` task in a process starts its :class:`~django_outbox.engine.Engine`
threads, its recorder thread, its HTTP transport and its breaker store; they
live until the process stops.  A task claims its rows, loads the message
bodies (cached, they never change) and signing keys (cached for a while),
and hands the deliveries to the engine.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence

from django.db import DatabaseError, transaction
from django.db.models import F
from django.utils import timezone

from django_outbox.attempt import Job, MessageData, perform
from django_outbox.claims import Claimed, claim, new_token, not_yet_due
from django_outbox.conf import conf
from django_outbox.dispatch import publish
from django_outbox.engine import Engine
from django_outbox.hosts import breaker_policy, breaker_store, unavailable_hosts
from django_outbox.keys import SenderKey
from django_outbox.models import Delivery, DeliveryState, Lane, Message
from django_outbox.outcomes import Kind, Outcome
from django_outbox.recorder import Recorder
from django_outbox.transport import Transport

logger = logging.getLogger("django_outbox.worker")

_KEY_TTL = 300.0
_MESSAGES_KEPT = 256
#: Seconds between looks for priority-lane work while a task waits for room.
_URGENT_POLL = 0.05
#: Seconds a task waits for room at most: it then hands over the rest anyway (the
#: send-by time still protects their leases), so that a Celery process is never
#: held for long, not even by an engine that has stopped making progress.
_ROOM_WAIT_LIMIT = 10.0


class WorkerProcess:
    """The engine, recorder, transport, breakers and caches of one process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.recorder = Recorder()
        self.transport = Transport(
            user_agent=conf.USER_AGENT,
            connect_timeout=conf.CONNECT_TIMEOUT,
            total_timeout=conf.TOTAL_TIMEOUT,
            read_timeout=conf.READ_TIMEOUT,
            max_response_bytes=conf.MAX_RESPONSE_BYTES,
            allowed_networks=conf.ALLOWED_NETWORKS,
            ca_bundle=conf.CA_BUNDLE,
        )
        self.breakers = breaker_store()
        self.policy = breaker_policy()
        self.engine: Engine[Job] = Engine(
            self._send,
            host_of=lambda job: job.claimed.host,
            urgent=lambda job: job.claimed.lane == Lane.PRIORITY,
            concurrency=conf.CONCURRENCY,
            per_host=conf.PER_HOST,
            max_threads=conf.MAX_THREADS,
        )
        self._messages: OrderedDict[int, MessageData] = OrderedDict()
        self._keys: dict[str, tuple[SenderKey | None, float]] = {}
        self._lock = threading.Lock()

    def _send(self, job: Job) -> None:
        if time.monotonic() > job.send_by:
            # It waited so long behind its host that its lease could lapse
            # while it is sent: give it back rather than risk a double send.
            error = "released: waited too long behind its host for the lease"
            self.recorder.put(Outcome(job.claimed.id, job.token, Kind.RELEASED, error=error))
            return
        try:
            outcome = perform(job, self.transport, self.breakers, self.policy)
        except Exception as error:
            logger.exception("delivery %s failed unexpectedly", job.claimed.id)
            outcome = Outcome(job.claimed.id, job.token, Kind.RETRY, error=f"internal: {error!r}")
        self.recorder.put(outcome)

    def messages(self, ids: Iterable[int]) -> dict[int, MessageData]:
        """The messages with ``ids``, from memory or one query."""
        wanted = set(ids)
        with self._lock:
            found = {i: self._messages[i] for i in wanted if i in self._messages}
        missing = wanted - found.keys()
        if missing:
            for row in Message.objects.filter(id__in=missing).values_list(
                "id",
                "sender",
                "body",
                "body_sha256",
                "content_type",
                "deadline",
                "activity_type",
                "synchronize_collection",
            ):
                data = MessageData(row[0], row[1], bytes(row[2]), bytes(row[3]), *row[4:])
                found[data.id] = data
            with self._lock:
                for data in found.values():
                    self._messages[data.id] = data
                while len(self._messages) > _MESSAGES_KEPT:
                    self._messages.popitem(last=False)
        return found

    def key_for(self, sender: str) -> SenderKey | None:
        """The sender's signing key, asking the resolver at most every few minutes."""
        now = time.monotonic()
        cached = self._keys.get(sender)
        if cached is not None and cached[1] > now:
            return cached[0]
        key = conf.KEY_RESOLVER(sender)
        if len(self._keys) > 10_000:
            self._keys.clear()
        self._keys[sender] = (key, now + _KEY_TTL)
        return key  # type: ignore[no-any-return]

    def stop(self, timeout: float) -> None:
        """Release what never started at once; give what runs ``timeout`` to finish.

        Deliveries still running after that are released too, so that another
        worker sends them now rather than after the lease; if the inbox had in
        fact received one, it receives it twice (at least once).
        """
        release([(job.claimed, job.token) for job in self.engine.stop()])
        deadline = time.monotonic() + timeout
        running = self.engine.join(timeout)
        if not self.recorder.flush(max(0.1, deadline - time.monotonic())):
            logger.warning("stopped before every outcome was saved; their leases will lapse")
        release([(job.claimed, job.token) for job in running])


_process: WorkerProcess | None = None
_process_lock = threading.Lock()


def current() -> WorkerProcess:
    """This process's :class:`WorkerProcess`, started on first use (and after a fork)."""
    global _process
    with _process_lock:
        if _process is None or _process.pid != os.getpid():
            _process = WorkerProcess()
        return _process


def stop_current(timeout: float) -> None:
    """Stop this process's engine, if it has one (warm shutdown)."""
    global _process
    with _process_lock:
        process, _process = _process, None
    if process is not None and process.pid == os.getpid():
        process.stop(timeout)


def release(claims: Sequence[tuple[Claimed, str]]) -> None:
    """Give claimed deliveries back unsent, with their attempt refunded, and dispatch them.

    One statement per claim token, in one transaction: a stopping worker may hold
    hundreds, and on SQLite each commit is a disk sync.
    """
    by_token: dict[str, list[int]] = defaultdict(list)
    by_lane: dict[str, list[int]] = defaultdict(list)
    for claimed, token in claims:
        by_token[token].append(claimed.id)
        by_lane[claimed.lane].append(claimed.id)
    if not by_token:
        return
    now = timezone.now()
    with transaction.atomic():
        for token, ids in by_token.items():
            Delivery.objects.filter(
                id__in=ids, claimed_by=token, state=DeliveryState.SENDING
            ).update(
                state=DeliveryState.QUEUED,
                attempts=F("attempts") - 1,
                claimed_by="",
                lease_until=None,
                next_attempt_at=now,
                dispatched_at=now,
            )
    # Ids that were not released (finished meanwhile) find nothing to claim.
    publish(dict(by_lane))


def _synchronization(message: MessageData, inbox: str) -> dict[str, str]:
    """The FEP-8fcf header for this delivery, when its batch asked for one."""
    write = conf.COLLECTION_SYNCHRONIZATION
    if not message.synchronize_collection or write is None:
        return {}
    value = write(message.sender, inbox)
    return {"Collection-Synchronization": value} if value else {}


def run_deliveries(ids: Sequence[int], *, wait: bool = True) -> tuple[list[int], float] | None:
    """Claim ``ids`` and start sending them.

    With ``wait``, the caller waits while the engine's backlog is full (so a
    worker claims no more than it can send before its leases run out), and
    meanwhile takes priority-lane deliveries that are due straight from the
    database: a Celery process blocked here cannot take the priority lane's
    messages, which would otherwise wait for it.  Returns the ids that are
    queued but not due yet with the seconds until the first is, for the task
    to retry with, or ``None``.
    """
    process = current()
    token = new_token()
    claimed = claim(ids, token)
    later = None
    if len(claimed) < len(ids):
        taken = {c.id for c in claimed}
        waiting, due = not_yet_due([i for i in ids if i not in taken], conf.COUNTDOWN_LIMIT)
        if due is not None:
            later = (waiting, max(0.0, (due - timezone.now()).total_seconds()))
    if not claimed:
        return later
    messages = process.messages(c.message_id for c in claimed)
    now = timezone.now()
    unavailable = unavailable_hosts()
    skip = conf.SKIP_UNAVAILABLE
    jobs: list[Job] = []
    # Room in the lease for two knocks of the whole time budget and saving the
    # outcome; with a lease too short for that (system check W003), half of it.
    lease = conf.LEASE_SECONDS
    send_by = time.monotonic() + max(lease / 2, lease - 2 * conf.TOTAL_TIMEOUT - 10)
    for row in claimed:
        message = messages[row.message_id]
        key = process.key_for(message.sender)
        if message.deadline is not None and message.deadline <= now:
            process.recorder.put(Outcome(row.id, token, Kind.EXPIRED))
        elif row.host in unavailable and skip(row.inbox, message.activity_type):
            error = f"skipped: {row.host} is marked unavailable"
            process.recorder.put(Outcome(row.id, token, Kind.SKIPPED, error=error))
        elif key is None:
            error = f"the key resolver no longer has a key for {message.sender}"
            process.recorder.put(Outcome(row.id, token, Kind.REFUSED, error=error))
        else:
            extra = _synchronization(message, row.inbox)
            jobs.append(Job(row, token, message, key, send_by, extra))
    _hand_over(process, jobs, wait=wait)
    return later


def _hand_over(process: WorkerProcess, jobs: list[Job], *, wait: bool) -> None:
    """Submit ``jobs`` to the engine, taking urgent work while waiting for room."""
    engine = process.engine
    urgent = [job for job in jobs if job.claimed.lane == Lane.PRIORITY]
    refused = engine.submit(urgent, block=False)
    jobs = [job for job in jobs if job.claimed.lane != Lane.PRIORITY]
    give_up_waiting = time.monotonic() + _ROOM_WAIT_LIMIT
    while jobs:
        if wait and time.monotonic() > give_up_waiting:
            logger.warning(
                "no room in the engine for %ss; handing over %d more", _ROOM_WAIT_LIMIT, len(jobs)
            )
            wait = False
        if wait and not engine.wait_for_room(_URGENT_POLL):
            _take_urgent()
            continue
        fits = engine.room() if wait else len(jobs)
        refused += engine.submit(jobs[: max(1, fits)], block=False)
        jobs = jobs[max(1, fits) :]
    if refused:
        release([(job.claimed, job.token) for job in refused])


def _take_urgent() -> None:
    """Claim and start the priority-lane deliveries that are due, without waiting.

    Only a shortcut: their own Celery messages remain, so a database error here is
    logged and the caller goes on handing over the deliveries it has claimed.
    """
    try:
        due = list(
            Delivery.objects.filter(
                state=DeliveryState.QUEUED, lane=Lane.PRIORITY, next_attempt_at__lte=timezone.now()
            )
            .order_by("next_attempt_at")
            .values_list("id", flat=True)[: conf.CHUNK_SIZE]
        )
        if due:
            run_deliveries(due, wait=False)
    except DatabaseError:
        logger.warning("could not look for priority-lane deliveries", exc_info=True)

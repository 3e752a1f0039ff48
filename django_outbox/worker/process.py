"""What one worker process keeps between tasks, and the task's half of sending.

The first ``deliver`` task in a process starts its :class:`~django_outbox.worker.engine.Engine`
(an event loop in a thread), its recorder thread, its HTTP transport and its
breaker store; they live until the process stops.  A task claims its rows,
loads the message bodies (cached: they never change) and signing keys or
webhook secrets (cached for a while), and hands the deliveries to the engine.
Secrets are resolved here, in the task's thread, because the sending coroutines
never touch the database; they travel in the
:class:`~django_outbox.worker.attempt.Job`, in memory, never in a Celery
message or a row.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence

from django.db import DatabaseError
from django.utils import timezone

from django_outbox.breakers.configured import configured_policy, configured_store
from django_outbox.conf import conf
from django_outbox.dispatch import publish
from django_outbox.hosts import unavailable_hosts
from django_outbox.keys import SenderKey
from django_outbox.metrics.recording import stop_recording, watch_engine
from django_outbox.models import Delivery, DeliveryState, Lane, Signing
from django_outbox.outcomes import AttemptResult, Outcome
from django_outbox.payments.claims import payment_jobs
from django_outbox.payments.reports import PAID_AT_CLAIM
from django_outbox.signing.schemes import recall
from django_outbox.signing.webhooks import InvalidWebhookSecret, WebhookKeys, as_webhook_keys
from django_outbox.store.claimed import ClaimedRow, MessageData, load_messages, new_token
from django_outbox.store.queries import not_yet_due
from django_outbox.store.transitions import claim, release
from django_outbox.transport import Transport
from django_outbox.worker.attempt import Job, first_origins, perform
from django_outbox.worker.engine import Engine
from django_outbox.worker.recorder import Recorder, park_payment_holds

logger = logging.getLogger("django_outbox.worker")

_KEY_TTL = 300.0
#: Seconds a webhook endpoint's secrets are reused: short, so that a rotation
#: (or a secret removed once receivers use the new one) is seen within a minute.
_WEBHOOK_KEYS_TTL = 60.0
_CACHED_SENDERS = 10_000
_MESSAGES_KEPT = 256
#: Seconds between looks for priority-lane work while a task waits for room.
_URGENT_POLL = 0.05
#: Seconds a task waits for room at most: it then hands over the rest anyway (the
#: send-by time still protects their leases), so that a Celery process is never
#: held for long, not even by an engine that has stopped making progress.
_ROOM_WAIT_LIMIT = 10.0
#: More ids than any task carries.
_NO_LIMIT = 1 << 30


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
        self.breakers = configured_store()
        self.policy = configured_policy()
        self.engine: Engine[Job] = Engine(
            self._send,
            host_of=lambda job: job.row.host,
            urgent=lambda job: job.row.lane == Lane.PRIORITY,
            concurrency=conf.CONCURRENCY,
            per_host=conf.PER_HOST,
            max_in_flight=conf.MAX_IN_FLIGHT,
        )
        watch_engine(self.engine.usage)
        self._messages: OrderedDict[int, MessageData] = OrderedDict()
        self._keys: dict[str, tuple[SenderKey | None, float]] = {}
        self._webhook_keys: dict[tuple[str, str], tuple[WebhookKeys | None, float]] = {}
        self._lock = threading.Lock()

    async def _send(self, job: Job) -> None:
        if time.monotonic() > job.send_by:
            # It waited so long behind its host that its lease could lapse
            # while it is sent: give it back rather than risk a double send.
            error = "released: waited too long behind its host for the lease"
            self.recorder.put(job.outcome(AttemptResult.RELEASED, error=error))
            return
        try:
            outcome = await perform(job, self.transport, self.breakers, self.policy)
        except Exception as error:
            logger.exception("delivery %s failed unexpectedly", job.row.id)
            outcome = job.outcome(
                AttemptResult.RETRY, error=f"internal: {error!r}", failure="error"
            )
        self.recorder.put(outcome)

    def messages(self, ids: Iterable[int]) -> dict[int, MessageData]:
        """The messages with ``ids``, from memory or one query."""
        wanted = set(ids)
        with self._lock:
            found = {i: self._messages[i] for i in wanted if i in self._messages}
        missing = wanted - found.keys()
        if missing:
            found.update(load_messages(missing))
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
        if len(self._keys) > _CACHED_SENDERS:
            self._keys.clear()
        self._keys[sender] = (key, now + _KEY_TTL)
        return key

    def webhook_keys_for(self, sender: str, endpoint: str) -> WebhookKeys | None:
        """The endpoint's webhook secrets, asking the resolver at most once a minute.

        Raises :class:`InvalidWebhookSecret` (not cached) when the resolver's
        answer does not parse.
        """
        now = time.monotonic()
        cached = self._webhook_keys.get((sender, endpoint))
        if cached is not None and cached[1] > now:
            return cached[0]
        keys = resolve_webhook_keys(sender, endpoint)
        if len(self._webhook_keys) > _CACHED_SENDERS:
            self._webhook_keys.clear()
        self._webhook_keys[(sender, endpoint)] = (keys, now + _WEBHOOK_KEYS_TTL)
        return keys

    def jobs_for(self, claimed: list[ClaimedRow]) -> list[Job]:
        """The jobs to send for ``claimed``; those not to send go to the recorder at once.

        The schemes their origins accepted are read from the shared cache here, in
        one round trip for the claim, rather than by each first contact on the loop.
        """
        messages = self.messages(row.message_id for row in claimed)
        jobs = prepare_jobs(
            claimed, messages, self.key_for, self.recorder.put, self.webhook_keys_for
        )
        recall(first_origins(jobs))
        return jobs

    def stop(self, timeout: float) -> None:
        """Release what never started at once; give what runs ``timeout`` to finish.

        Deliveries still running after that are released too, so that another
        worker sends them now rather than after the lease; if the inbox had in
        fact received one, it receives it twice (at least once).
        """
        give_back([job.row for job in self.engine.stop()])
        deadline = time.monotonic() + timeout
        running = self.engine.join(timeout)
        if not self.recorder.flush(max(0.1, deadline - time.monotonic())):
            logger.warning("stopped before every outcome was saved; their leases will lapse")
        give_back([job.row for job in running])
        stop_recording()


_process: WorkerProcess | None = None
_process_lock = threading.Lock()


def this_process() -> WorkerProcess:
    """This process's :class:`WorkerProcess`, started on first use (and after a fork)."""
    global _process
    with _process_lock:
        if _process is None or _process.pid != os.getpid():
            _process = WorkerProcess()
        return _process


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


def prepare_jobs(
    claimed: Sequence[ClaimedRow],
    messages: Mapping[int, MessageData],
    key_for: Callable[[str], SenderKey | None],
    settle: Callable[[Outcome], None],
    webhook_keys_for: Callable[[str, str], WebhookKeys | None] | None = None,
) -> list[Job]:
    """The jobs to send for ``claimed``; the outcomes of those not to send go to ``settle``.

    A delivery past its batch's deadline expires, one to an unavailable host
    is skipped (as ``OUTBOX_SKIP_UNAVAILABLE`` decides), one whose sender lost
    its key (or whose endpoint its webhook secret) is refused, and one whose
    webhook secret does not parse is retried.  ``messages`` holds the message
    of every claimed row; ``key_for`` gives a sender's key and
    ``webhook_keys_for`` an endpoint's secrets (by default, the resolver's
    answer, asked each time).  With ``OUTBOX_PAYMENTS`` set, each job carries
    its delivery's open payment attempt and its host's kept token, and the
    deliveries whose host another one is paying are parked until their hold
    ends, in one statement (no outcome: a hold is not an attempt), unless
    their batch's deadline comes first.
    """
    payments, wait = payment_jobs(claimed)
    now = timezone.now()
    unavailable = unavailable_hosts()
    skip = conf.SKIP_UNAVAILABLE
    # Room in the lease for two knocks of the whole time budget and saving the
    # outcome; with a lease too short for that (system check W003), half of it.
    lease = conf.LEASE_SECONDS
    send_by = time.monotonic() + max(lease / 2, lease - 2 * conf.TOTAL_TIMEOUT - 10)
    jobs: list[Job] = []
    holds: list[Outcome] = []
    for row in claimed:
        message = messages[row.message_id]
        if message.deadline is not None and message.deadline <= now:
            settle(Outcome(row, message, AttemptResult.EXPIRED))
            continue
        if row.host in unavailable and skip(row.inbox, message.activity_type):
            error = f"skipped: {row.host} is marked unavailable"
            settle(Outcome(row, message, AttemptResult.SKIPPED, error=error))
            continue
        try:
            signer = _signer(message, row.inbox, key_for, webhook_keys_for or resolve_webhook_keys)
        except InvalidWebhookSecret as invalid:
            error = f"internal: unusable webhook secret: {invalid}"
            settle(Outcome(row, message, AttemptResult.RETRY, error=error))
            continue
        if isinstance(signer, str):
            settle(Outcome(row, message, AttemptResult.REFUSED, error=signer))
            continue
        if row.id in wait:
            error, held_for = PAID_AT_CLAIM, wait[row.id]
            holds.append(Outcome(row, message, AttemptResult.HELD, error=error, held_for=held_for))
            continue
        extra = _synchronization(message, row.inbox)
        jobs.append(Job(row, message, signer, send_by, extra, payments.get(row.id)))
    # Parked at once; a hold past its batch's deadline goes to the recorder, to fail.
    for outcome in park_payment_holds(holds):
        settle(outcome)
    return jobs


def resolve_webhook_keys(sender: str, endpoint: str) -> WebhookKeys | None:
    """The endpoint's secrets as ``OUTBOX_WEBHOOK_SECRET_RESOLVER`` answers now (no cache)."""
    return as_webhook_keys(conf.WEBHOOK_SECRET_RESOLVER(sender, endpoint))


def _signer(
    message: MessageData,
    inbox: str,
    key_for: Callable[[str], SenderKey | None],
    webhook_keys_for: Callable[[str, str], WebhookKeys | None],
) -> SenderKey | WebhookKeys | str:
    """What signs ``message`` to ``inbox``: a sender key, webhook secrets, or why none.

    A string is the error of a delivery refused for it: the resolver no longer
    has a key for the sender, or a secret for the endpoint.
    """
    if message.signing == Signing.STANDARD_WEBHOOKS:
        keys = webhook_keys_for(message.sender, inbox)
        if keys is None:
            return f"the webhook secret resolver no longer has a secret for {inbox}"
        return keys
    key = key_for(message.sender)
    if key is None:
        return f"the key resolver no longer has a key for {message.sender}"
    return key


def _synchronization(message: MessageData, inbox: str) -> dict[str, str]:
    """The FEP-8fcf header for this delivery, when its batch asked for one."""
    write = conf.COLLECTION_SYNCHRONIZATION
    if not message.synchronize_collection or write is None:
        return {}
    value = write(message.sender, inbox)
    return {"Collection-Synchronization": value} if value else {}


def run_deliveries(
    ids: Sequence[int], *, wait: bool = True, urgent: bool = False
) -> tuple[list[int], float] | None:
    """Claim ``ids`` and start sending them.

    With ``wait``, the caller claims only as many as the engine has room for,
    and waits for room before claiming more, so that a process holds no claims
    it is not about to send (what a killed process strands is what it was
    sending, and what fits in its engine's lines); meanwhile it takes
    priority-lane deliveries that are due straight from the database, since a
    Celery process blocked here cannot take the priority lane's messages.
    ``urgent`` ids (the priority lane's) are claimed at once.  Returns the ids
    that are queued but not due yet with the seconds until the first is, for the
    task to retry with, or ``None``.
    """
    process = this_process()
    token = new_token()
    pending = list(ids)
    taken: set[int] = set()
    refused: list[Job] = []
    give_up_waiting = time.monotonic() + _ROOM_WAIT_LIMIT
    while pending:
        room = (
            _room(process, give_up_waiting, len(pending)) if wait and not urgent else len(pending)
        )
        claimed = claim(pending[:room], token)
        pending = pending[room:]
        taken.update(row.id for row in claimed)
        if claimed:
            refused += process.engine.submit(process.jobs_for(claimed))
    give_back([job.row for job in refused])
    waiting, due = not_yet_due([i for i in ids if i not in taken], conf.COUNTDOWN_LIMIT)
    if due is None:
        return None
    return waiting, max(0.0, (due - timezone.now()).total_seconds())


def _room(process: WorkerProcess, give_up_waiting: float, left: int) -> int:
    """How many of the ``left`` deliveries to claim next: once the engine has room
    for a quarter of its concurrency (or for all that is left), that room, so that
    a busy engine is not fed one claim per delivery; after ``give_up_waiting``
    (monotonic), everything left.  Urgent work found while waiting is claimed and
    started meanwhile."""
    engine = process.engine
    want = min(left, max(1, conf.CONCURRENCY // 4))
    while not engine.wait_for_room(_URGENT_POLL, want):
        if time.monotonic() > give_up_waiting:
            logger.warning("no room in the engine for %ss; claiming the rest", _ROOM_WAIT_LIMIT)
            return _NO_LIMIT
        give_back([job.row for job in engine.submit(_urgent_jobs(process))])
    return max(want, engine.room())


def _urgent_jobs(process: WorkerProcess) -> list[Job]:
    """Claim the priority-lane deliveries that are due; their jobs, to start at once.

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
        claimed = claim(due, new_token()) if due else []
        return process.jobs_for(claimed) if claimed else []
    except DatabaseError:
        logger.warning("could not look for priority-lane deliveries", exc_info=True)
        return []

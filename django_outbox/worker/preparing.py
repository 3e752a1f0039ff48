"""The task's half of sending: a claim's rows turned into jobs for the engine.

A claimed delivery becomes a :class:`~django_outbox.worker.attempt.Job` with what signs
it and the headers it carries, or an outcome at once: expired, skipped, refused (its
sender lost its key, its endpoint its secret), held by an extension, or retried
after an internal error.  What the application's functions answer for a claim (the key
resolver, the webhook secret resolver, the collection-synchronisation callback) comes
through :class:`Answers`: the worker asks them up front, concurrently and bounded in
time (:class:`AskedAnswers`), the testing helpers when each row asks
(:class:`DirectAnswers`).  An answer that is an exception gives its row an internal
error and the others go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from django.utils import timezone

from django_outbox.conf import conf
from django_outbox.destinations.availability import unavailable_hosts
from django_outbox.destinations.endpoint_health import disabled_endpoints, skip_reason
from django_outbox.extensions.registry import active, tickets
from django_outbox.models import Signing
from django_outbox.sending.keys import SenderKey
from django_outbox.signing.webhooks import InvalidWebhookSecret, WebhookKeys, as_webhook_keys
from django_outbox.store.transitions import park
from django_outbox.upkeep.pauses import paused_hosts
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptResult, Outcome, internal_error
from django_outbox.worker.attempt import Job

logger = logging.getLogger("django_outbox.worker")

Signer = SenderKey | WebhookKeys | str
"""What signs a delivery: a sender key, webhook secrets, or (a string) why it is refused."""


class Answers(Protocol):
    """What the application's functions say about one claim's deliveries."""

    def signer(self, message: MessageData, inbox: str) -> Signer:
        """What signs ``message`` to ``inbox``; raises what the resolver raised."""
        ...

    def headers(self, message: MessageData, inbox: str) -> dict[str, str]:
        """Extra headers of the delivery (FEP-8fcf); raises what the callback raised."""
        ...


def resolve_webhook_keys(sender: str, endpoint: str) -> WebhookKeys | None:
    """The endpoint's secrets as ``OUTBOX_WEBHOOK_SECRET_RESOLVER`` answers now (no cache)."""
    return as_webhook_keys(conf.WEBHOOK_SECRET_RESOLVER(sender, endpoint))


def needs_synchronization(message: MessageData) -> bool:
    """Whether deliveries of ``message`` carry a Collection-Synchronization header."""
    return message.synchronize_collection and conf.COLLECTION_SYNCHRONIZATION is not None


def synchronization_header(value: str | None) -> dict[str, str]:
    """The FEP-8fcf header for the callback's answer ``value``."""
    return {"Collection-Synchronization": value} if value else {}


def signer_from(message: MessageData, inbox: str, found: SenderKey | WebhookKeys | None) -> Signer:
    """``found`` (the resolver's answer for the delivery), or why the delivery is refused."""
    if found is not None:
        return found
    if message.signing == Signing.STANDARD_WEBHOOKS:
        return f"the webhook secret resolver no longer has a secret for {inbox}"
    return f"the key resolver no longer has a key for {message.sender}"


class DirectAnswers:
    """:class:`Answers` asked of the application's functions when each row asks."""

    def __init__(self, key_for: Callable[[str], SenderKey | None]) -> None:
        self._key_for = key_for

    def signer(self, message: MessageData, inbox: str) -> Signer:
        """See :meth:`Answers.signer`."""
        if message.signing == Signing.STANDARD_WEBHOOKS:
            return signer_from(message, inbox, resolve_webhook_keys(message.sender, inbox))
        return signer_from(message, inbox, self._key_for(message.sender))

    def headers(self, message: MessageData, inbox: str) -> dict[str, str]:
        """See :meth:`Answers.headers`."""
        write = conf.COLLECTION_SYNCHRONIZATION
        if not needs_synchronization(message) or write is None:
            return {}
        return synchronization_header(write(message.sender, inbox))


class AskedAnswers:
    """:class:`Answers` asked up front for a claim: by sender its key, by ``(sender,
    endpoint)`` its webhook secrets, by ``(sender, inbox)`` its synchronisation header's
    value; each the answer or the exception the function raised (or a time-out)."""

    def __init__(
        self,
        keys: Mapping[str, SenderKey | Exception | None],
        secrets: Mapping[tuple[str, str], WebhookKeys | Exception | None],
        synchronization: Mapping[tuple[str, str], str | Exception | None],
    ) -> None:
        self._keys = keys
        self._secrets = secrets
        self._synchronization = synchronization

    def signer(self, message: MessageData, inbox: str) -> Signer:
        """See :meth:`Answers.signer`."""
        found: SenderKey | WebhookKeys | Exception | None
        if message.signing == Signing.STANDARD_WEBHOOKS:
            found = self._secrets[(message.sender, inbox)]
        else:
            found = self._keys[message.sender]
        if isinstance(found, Exception):
            raise found
        return signer_from(message, inbox, found)

    def headers(self, message: MessageData, inbox: str) -> dict[str, str]:
        """See :meth:`Answers.headers`."""
        if not needs_synchronization(message):
            return {}
        value = self._synchronization[(message.sender, inbox)]
        if isinstance(value, Exception):
            raise value
        return synchronization_header(value)


def prepare_jobs(
    claimed: Sequence[ClaimedRow],
    messages: Mapping[int, MessageData],
    answers: Answers,
    settle: Callable[[Outcome], None],
) -> list[Job]:
    """The jobs to send for ``claimed``; the outcomes of those not to send go to ``settle``.

    A delivery past its batch's deadline expires, one to a paused host is parked
    until the pause ends (:mod:`~django_outbox.upkeep.pauses`), one to an unavailable host
    is skipped (as ``OUTBOX_SKIP_UNAVAILABLE`` decides), and so is a webhook to a
    disabled endpoint, one whose sender lost
    its key (or whose endpoint its webhook secret) is refused, and one whose
    webhook secret does not parse, or whose resolver raised or did not answer, is
    retried (an internal error).  ``messages`` holds the message of every claimed row.
    Each job carries the ticket of the extension that takes part in it, if any; the
    deliveries an extension holds back are parked by it (no outcome: a hold is not an
    attempt), unless their batch's deadline comes first.
    """
    found = tickets(claimed, messages)
    now = timezone.now()
    unavailable = unavailable_hosts()
    disabled = disabled_endpoints()
    paused = paused_hosts()
    parked: dict[str, list[tuple[ClaimedRow, datetime]]] = {}
    # Room in the lease for two knocks of the whole time budget and saving the
    # outcome; with a lease too short for that (system check W003), half of it.
    lease = conf.LEASE_SECONDS
    started = time.monotonic()
    send_by = started + max(lease / 2, lease - 2 * conf.TOTAL_TIMEOUT - 10)
    finish_by = started + lease - 5
    jobs: list[Job] = []
    holds: list[Outcome] = []
    for row in claimed:
        message = messages[row.message_id]
        try:
            if message.deadline is not None and message.deadline <= now:
                settle(Outcome(row, message, AttemptResult.EXPIRED))
                continue
            pause = paused.get(row.host)
            if pause is not None:
                parked.setdefault(pause.error, []).append((row, pause.parked_until(now)))
                continue
            if row.host in unavailable and conf.SKIP_UNAVAILABLE(row.inbox, message.activity_type):
                error = f"skipped: {row.host} is marked unavailable"
                settle(Outcome(row, message, AttemptResult.SKIPPED, error=error))
                continue
            if row.inbox in disabled and message.signing == Signing.STANDARD_WEBHOOKS:
                error = skip_reason(row.inbox)
                settle(Outcome(row, message, AttemptResult.SKIPPED, error=error))
                continue
            signer = answers.signer(message, row.inbox)
            if isinstance(signer, str):
                settle(Outcome(row, message, AttemptResult.REFUSED, error=signer))
                continue
            if row.id in found.holds:
                error, held_for = found.holds[row.id]
                holds.append(
                    Outcome(row, message, AttemptResult.HELD, error=error, held_for=held_for)
                )
                continue
            extra = answers.headers(message, row.inbox)
        except InvalidWebhookSecret as invalid:
            settle(internal_error(row, message, "unusable webhook secret", str(invalid)))
            continue
        except Exception as error:
            logger.warning("could not prepare delivery %s: %r", row.id, error)
            settle(internal_error(row, message, "preparing the delivery", error))
            continue
        ticket = found.tickets.get(row.id)
        jobs.append(Job(row, message, signer, send_by, extra, ticket, finish_by))
    # Parked at once; a hold past its batch's deadline goes to the recorder, to fail.
    for extension in active():
        holds = extension.park(holds)
    for outcome in holds:
        settle(outcome)
    for why, rows in parked.items():
        park(rows, why)
    return jobs

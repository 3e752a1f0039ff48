"""One attempt at one delivery, as a coroutine on the engine's event loop.

It asks the circuit breaker, signs, POSTs, and turns what happened into an
:class:`~django_outbox.outcomes.Outcome`.  An ActivityPub delivery is signed in
the scheme its origin is known to accept, and knocks again with the other
scheme on a 400 or 401; a webhook is signed with every secret of its endpoint
(Standard Webhooks), afresh for each attempt, with its message's unchanging
``webhook-id``.  It touches no database: the recorder saves the outcome.
What may block (a breaker kept in Redis, the shared cache of schemes) runs on
the loop's executor, and only when this process's own copy cannot answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django_outbox.breakers import Admission, BreakerPolicy, BreakerStore, breaker_key
from django_outbox.conf import conf
from django_outbox.keys import SenderKey
from django_outbox.outcomes import AttemptResult, Outcome, server_failed
from django_outbox.signing import Scheme, fallback_scheme, sign_headers
from django_outbox.signing.schemes import remember, remember_here, remembered, remembered_here
from django_outbox.signing.webhooks import WebhookKeys, sign_webhook
from django_outbox.store.claimed import ClaimedRow, MessageData
from django_outbox.transport import (
    BlockedAddress,
    Response,
    Transport,
    TransportError,
    retry_after_seconds,
)


@dataclass(frozen=True)
class Job:
    """A claimed delivery with everything needed to send it."""

    row: ClaimedRow
    message: MessageData
    #: The sender's key (HTTP Signatures), or the endpoint's secrets (a webhook).
    key: SenderKey | WebhookKeys
    #: Monotonic time after which it is given back unsent: its lease could lapse mid-send.
    send_by: float
    extra_headers: Mapping[str, str] = field(default_factory=dict)

    def outcome(
        self,
        result: AttemptResult,
        *,
        status: int | None = None,
        error: str = "",
        retry_after: float | None = None,
        held_for: float | None = None,
    ) -> Outcome:
        """The :class:`Outcome` of this job's attempt."""
        return Outcome(self.row, self.message, result, status, error, retry_after, held_for)


logger = logging.getLogger("django_outbox.attempt")

_HELD = {
    "open": "held: the destination's circuit breaker is open",
    "busy": "held: {} deliveries to the destination await an answer",
}


async def _post(
    transport: Transport, job: Job, key: SenderKey, url: str, scheme: Scheme
) -> Response:
    headers = sign_headers(
        scheme,
        key,
        method="POST",
        url=url,
        body=job.message.body,
        content_type=job.message.content_type,
        body_sha256=job.message.body_sha256,
        extra_headers=job.extra_headers,
        covered_extra=tuple(name.lower() for name in job.extra_headers),
    )
    return await transport.post(url, headers, job.message.body)


async def _knock(transport: Transport, job: Job, key: SenderKey, url: str) -> Response:
    """POST to ``url`` in the origin's scheme, and in the other one after a 400 or 401."""
    parts = urlsplit(url)
    origin = f"{parts.scheme.lower()}://{parts.netloc.lower()}"
    here, known = remembered_here(origin)
    loop = asyncio.get_running_loop()
    if not here:
        known = await loop.run_in_executor(None, remembered, origin)
    first = known or Scheme(conf.FIRST_SCHEME)
    response = await _post(transport, job, key, url, first)
    accepted = first
    if response.status in (400, 401):
        accepted = fallback_scheme(first)
        response = await _post(transport, job, key, url, accepted)
    if 200 <= response.status < 300 and accepted != known and remember_here(origin, accepted):
        loop.run_in_executor(None, _share, origin, accepted)  # not awaited: nothing waits on it
    return response


async def _signed_post(transport: Transport, job: Job, url: str) -> Response:
    """POST the job's body to ``url``, signed as its message says."""
    if isinstance(job.key, WebhookKeys):
        message = job.message
        headers = sign_webhook(
            job.key, message.webhook_id, message.body, content_type=message.content_type
        )
        return await transport.post(url, headers, message.body)
    return await _knock(transport, job, job.key, url)


def _share(origin: str, scheme: Scheme) -> None:
    """Tell the shared cache what ``origin`` accepted; a cache that fails is only logged."""
    try:
        remember(origin, scheme)
    except Exception:
        logger.warning("could not remember the scheme of %s in the cache", origin, exc_info=True)


def _judge(job: Job, response: Response) -> Outcome:
    """What an answer means for the delivery: delivered, refused for good, or retry."""
    status = response.status
    if 200 <= status < 300:
        return job.outcome(AttemptResult.DELIVERED, status=status)
    error = f"HTTP {status}"
    if conf.PERMANENT_STATUS(status):
        return job.outcome(AttemptResult.REFUSED, status=status, error=error)
    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
    return job.outcome(AttemptResult.RETRY, status=status, error=error, retry_after=retry_after)


async def perform(
    job: Job, transport: Transport, breakers: BreakerStore, policy: BreakerPolicy | None
) -> Outcome:
    """Make one attempt at ``job``: at each gateway in turn, or at its inbox."""
    targets = job.row.via or [job.row.inbox]
    outcome = job.outcome(AttemptResult.RETRY, error="nowhere to deliver")
    for url in targets:
        outcome = await _attempt_at(job, url, transport, breakers, policy)
        if outcome.result is AttemptResult.DELIVERED:
            break
    return outcome


async def _attempt_at(
    job: Job, url: str, transport: Transport, breakers: BreakerStore, policy: BreakerPolicy | None
) -> Outcome:
    key = ""
    admission: Admission | None = None
    loop = asyncio.get_running_loop()
    if policy is not None:
        key = breaker_key(urlsplit(url).hostname or "", url, conf.BREAKER_SCOPE)
        admission = breakers.admit_now(key, policy)
        if admission is None:
            admission = await loop.run_in_executor(None, breakers.admit, key, policy)
        if admission.kind == "held":
            error = _HELD[admission.why or "open"].format(policy.threshold)
            return job.outcome(AttemptResult.HELD, error=error, held_for=admission.retry_in)
    try:
        response = await _signed_post(transport, job, url)
    except BlockedAddress as error:
        outcome = job.outcome(AttemptResult.REFUSED, error=str(error))
    except TransportError as error:
        outcome = job.outcome(AttemptResult.RETRY, error=str(error))
    else:
        outcome = _judge(job, response)
    if policy is not None:
        failed = outcome.result is AttemptResult.RETRY and server_failed(outcome.status)
        if not breakers.record_now(key, policy, failed=failed, admission=admission):
            await loop.run_in_executor(
                None, lambda: breakers.record(key, policy, failed=failed, admission=admission)
            )
    return outcome

"""One attempt at one delivery, as a delivery thread makes it.

It asks the circuit breaker, signs in the scheme the host is known to
accept, knocks again with the other scheme on a 400 or 401, POSTs, and turns
what happened into an :class:`~django_outbox.outcomes.Outcome`.  It touches
no database: the recorder saves the outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from django_outbox.breakers import BreakerPolicy, BreakerStore, breaker_key
from django_outbox.claims import Claimed
from django_outbox.conf import conf
from django_outbox.keys import SenderKey
from django_outbox.outcomes import Kind, Outcome, server_failed
from django_outbox.schemes import remember, remembered
from django_outbox.signing import Scheme, other, sign_headers
from django_outbox.transport import (
    BlockedAddress,
    Response,
    Transport,
    TransportError,
    retry_after_seconds,
)


@dataclass(frozen=True)
class MessageData:
    """The parts of a stored message that sending needs, kept in process memory."""

    id: int
    sender: str
    body: bytes
    body_sha256: bytes
    content_type: str
    deadline: datetime | None
    activity_type: str
    synchronize_collection: bool


@dataclass(frozen=True)
class Job:
    """A claimed delivery with everything needed to send it."""

    claimed: Claimed
    token: str
    message: MessageData
    key: SenderKey
    send_by: float
    extra_headers: Mapping[str, str] = field(default_factory=dict)


_HELD = {
    "open": "held: the destination's circuit breaker is open",
    "busy": "held: {} deliveries to the destination await an answer",
}


def _post(transport: Transport, job: Job, url: str, scheme: Scheme) -> Response:
    headers = sign_headers(
        scheme,
        job.key,
        method="POST",
        url=url,
        body=job.message.body,
        content_type=job.message.content_type,
        body_sha256=job.message.body_sha256,
        extra_headers=job.extra_headers,
        covered_extra=tuple(name.lower() for name in job.extra_headers),
    )
    return transport.post(url, headers, job.message.body)


def _knock(transport: Transport, job: Job, url: str) -> Response:
    """POST to ``url`` in the host's scheme, and in the other one after a 400 or 401."""
    host = urlsplit(url).netloc.lower()
    known = remembered(host)
    first = known or Scheme(conf.FIRST_SCHEME)
    response = _post(transport, job, url, first)
    accepted = first
    if response.status in (400, 401):
        accepted = other(first)
        response = _post(transport, job, url, accepted)
    if 200 <= response.status < 300 and accepted != known:
        remember(host, accepted)
    return response


def _outcome(job: Job, response: Response) -> Outcome:
    status = response.status
    base = {"delivery_id": job.claimed.id, "token": job.token, "status": status}
    if 200 <= status < 300:
        return Outcome(kind=Kind.DELIVERED, **base)  # type: ignore[arg-type]
    error = f"HTTP {status}"
    if conf.PERMANENT_STATUS(status):
        return Outcome(kind=Kind.REFUSED, error=error, **base)  # type: ignore[arg-type]
    return Outcome(
        kind=Kind.RETRY,
        error=error,
        retry_after=retry_after_seconds(response.headers.get("Retry-After")),
        **base,  # type: ignore[arg-type]
    )


def perform(
    job: Job, transport: Transport, breakers: BreakerStore, policy: BreakerPolicy | None
) -> Outcome:
    """Make one attempt at ``job``: at each gateway in turn, or at its inbox."""
    targets = job.claimed.via or [job.claimed.inbox]
    outcome = Outcome(job.claimed.id, job.token, Kind.RETRY, error="nowhere to deliver")
    for url in targets:
        outcome = _attempt_at(job, url, transport, breakers, policy)
        if outcome.kind is Kind.DELIVERED:
            break
    return outcome


def _attempt_at(
    job: Job, url: str, transport: Transport, breakers: BreakerStore, policy: BreakerPolicy | None
) -> Outcome:
    key = ""
    admission = None
    if policy is not None:
        key = breaker_key(urlsplit(url).hostname or "", url, conf.BREAKER_SCOPE)  # type: ignore[arg-type]
        admission = breakers.admit(key, policy)
        if admission.kind == "held":
            return Outcome(
                job.claimed.id,
                job.token,
                Kind.HELD,
                error=_HELD[admission.why or "open"].format(policy.threshold),
                held_for=admission.retry_in,
            )
    try:
        response = _knock(transport, job, url)
    except BlockedAddress as error:
        outcome = Outcome(job.claimed.id, job.token, Kind.REFUSED, error=str(error))
    except TransportError as error:
        outcome = Outcome(job.claimed.id, job.token, Kind.RETRY, error=str(error))
    else:
        outcome = _outcome(job, response)
    if policy is not None:
        failed = outcome.kind is Kind.RETRY and server_failed(outcome.status)
        breakers.record(key, policy, failed=failed, admission=admission)
    return outcome

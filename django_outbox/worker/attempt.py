"""One attempt at one delivery, as a coroutine on the engine's event loop.

It asks the circuit breaker, signs, POSTs, and turns what happened into an
:class:`~django_outbox.values.outcomes.Outcome`.  An ActivityPub delivery is signed in
the scheme its origin is known to accept, and knocks again with the other
scheme on a 400 or 401; a webhook is signed with every secret of its endpoint
(Standard Webhooks), afresh for each attempt, with its message's unchanging
``webhook-id``.  A delivery that an extension takes part in carries its
:class:`~django_outbox.extensions.Ticket`, through which the POST is made.  It
touches no database: the recorder saves the outcome.  What may block (a breaker
kept in Redis, the shared cache of schemes, an extension's client) runs on the
loop's executor, and only when this
process's own copy cannot answer; the breaker questions of one turn of the
loop go together (:mod:`~django_outbox.worker.breaker_turns`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from django_outbox.breakers import Admission, BreakerPolicy, BreakerStore, Report, breaker_key
from django_outbox.breakers.policy import hold_error
from django_outbox.breakers.rates import RateStore
from django_outbox.conf import conf
from django_outbox.destinations.backoff import throttle_for
from django_outbox.exceptions import InvalidInbox
from django_outbox.extensions import Ticket
from django_outbox.sending.keys import SenderKey
from django_outbox.signing import Scheme, fallback_scheme, sign_headers
from django_outbox.signing.schemes import remember_here, remembered, remembered_here, share
from django_outbox.signing.webhooks import WEBHOOK_SCHEME, WebhookKeys, sign_webhook
from django_outbox.transport import (
    BlockedAddress,
    ConnectFailed,
    ResolveError,
    Response,
    TimedOut,
    Transport,
    TransportError,
    retry_after_seconds,
)
from django_outbox.transport.target import parse_target
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptReport, AttemptResult, Outcome, server_failed
from django_outbox.worker import breaker_turns, pacing


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
    #: What an extension that takes part in the attempt handed it at the claim.
    ticket: Ticket | None = None
    #: Monotonic time by which the attempt must have ended, whatever it waits for: a
    #: little before its lease lapses, after which another worker may send it.
    finish_by: float = math.inf

    @property
    def urgent(self) -> bool:
        """Whether its ticket says it goes first, on the engine's urgent loop, and in no
        host's line (a paid message does not wait behind unpaid ones)."""
        return self.ticket is not None and self.ticket.urgent

    def outcome(
        self,
        result: AttemptResult,
        *,
        status: int | None = None,
        error: str = "",
        retry_after: float | None = None,
        held_for: float | None = None,
        failure: str = "",
    ) -> Outcome:
        """The :class:`Outcome` of this job's attempt."""
        return Outcome(
            self.row, self.message, result, status, error, retry_after, held_for, failure=failure
        )


logger = logging.getLogger("django_outbox.attempt")


async def _post(
    transport: Transport,
    job: Job,
    key: SenderKey,
    url: str,
    scheme: Scheme,
    sent: list[str],
    authorization: str | None,
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
    if authorization is not None:
        headers["Authorization"] = authorization  # a bearer token, not part of the message
    sent.append(scheme.value)
    return await transport.post(url, headers, job.message.body)


def first_origins(jobs: Iterable[Job]) -> set[str]:
    """The origins whose accepted scheme ``jobs`` look up first: where those signed
    with HTTP Signatures knock first (their first gateway, or their inbox)."""
    origins = set()
    for job in jobs:
        if not isinstance(job.key, WebhookKeys):
            with contextlib.suppress(InvalidInbox):  # refused when it is attempted
                origins.add(parse_target((job.row.via or [job.row.inbox])[0]).origin)
    return origins


async def _knock(
    transport: Transport,
    job: Job,
    key: SenderKey,
    url: str,
    sent: list[str],
    authorization: str | None,
) -> Response:
    """POST to ``url`` in the origin's scheme, and in the other one after a 400 or 401."""
    origin = parse_target(url).origin  # cached; read as the transport reads it
    here, known = remembered_here(origin)
    loop = asyncio.get_running_loop()
    if not here:
        known = await loop.run_in_executor(None, remembered, origin)
    first = known or Scheme(conf.FIRST_SCHEME)
    response = await _post(transport, job, key, url, first, sent, authorization)
    accepted = first
    if response.status in (400, 401):
        accepted = fallback_scheme(first)
        response = await _post(transport, job, key, url, accepted, sent, authorization)
    if 200 <= response.status < 300 and accepted != known and remember_here(origin, accepted):
        share(origin, accepted)
    return response


async def _signed_post(
    transport: Transport, job: Job, url: str, sent: list[str], authorization: str | None = None
) -> Response:
    """POST the job's body to ``url``, signed as its message says."""
    if isinstance(job.key, WebhookKeys):
        message = job.message
        headers = sign_webhook(
            job.key, message.webhook_id, message.body, content_type=message.content_type
        )
        if authorization is not None:
            headers["Authorization"] = authorization
        sent.append(WEBHOOK_SCHEME)
        return await transport.post(url, headers, message.body)
    return await _knock(transport, job, job.key, url, sent, authorization)


class _Ending(NamedTuple):
    """How an attempt at one URL ended: the :class:`Outcome`'s fields but its timing."""

    result: AttemptResult
    status: int | None = None
    error: str = ""
    retry_after: float | None = None
    held_for: float | None = None
    failure: str = ""
    report: AttemptReport | None = None
    #: The host whose held deliveries may come back now, or ``""``.
    released: str = ""


def _judge(response: Response) -> _Ending:
    """What an answer means for the delivery: delivered, refused for good, or retry."""
    status = response.status
    if 200 <= status < 300:
        return _Ending(AttemptResult.DELIVERED, status)
    error = f"HTTP {status}"
    if conf.PERMANENT_STATUS(status):
        return _Ending(AttemptResult.REFUSED, status, error)
    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
    return _Ending(AttemptResult.RETRY, status, error, retry_after)


async def perform(
    job: Job,
    transport: Transport,
    breakers: BreakerStore,
    policy: BreakerPolicy | None,
    rates: RateStore | None = None,
) -> Outcome:
    """Make one attempt at ``job``: at each gateway in turn, or at its inbox, each at
    its host's rate when ``rates`` is given."""
    started_at, began = time.time(), time.perf_counter()
    ending = _Ending(AttemptResult.RETRY, error="nowhere to deliver")
    sent: list[str] = []
    released: list[str] = []
    for url in job.row.via or [job.row.inbox]:
        ending = await _attempt_at(job, url, transport, (breakers, policy, rates), sent)
        released += [ending.released] if ending.released else []
        if ending.result is AttemptResult.DELIVERED or ending.report is not None:
            break  # delivered, or a report to record before any other gateway is tried
    duration = time.perf_counter() - began
    result, status, error, retry_after, held_for, failure, report, _ = ending
    return Outcome(
        job.row, job.message, result, status, error, retry_after, held_for,
        started_at, duration, tuple(sent), failure, report, tuple(released),
    )  # fmt: skip


def _failure(error: TransportError) -> str:
    """The class of a request that got no answer, as the metrics count it."""
    if isinstance(error, TimedOut):
        return "timeout"
    if isinstance(error, ConnectFailed | ResolveError):
        return "connect"
    return "error"


async def _attempt_at(
    job: Job,
    url: str,
    transport: Transport,
    guards: tuple[BreakerStore, BreakerPolicy | None, RateStore | None],
    sent: list[str],
) -> _Ending:
    breakers, policy, rates = guards
    try:
        target = parse_target(url)
    except InvalidInbox as unusable:  # stored by an older version: it can never be sent
        return _Ending(AttemptResult.REFUSED, error=f"unusable URL: {unusable}", failure="error")
    url = target.url
    if rates is not None:
        hold = await pacing.wait_turn(rates, target.host, job.send_by)
        if hold is not None:
            return _Ending(AttemptResult.HELD, error=pacing.PACED_ERROR, held_for=hold)
    key = ""
    admission: Admission | None = None
    if policy is not None:
        key = breaker_key(target.host, url, conf.BREAKER_SCOPE)
        admission = await breaker_turns.admit(breakers, key, policy)
        if admission.kind == "held":
            error = hold_error(admission.why, policy.threshold)
            return _Ending(AttemptResult.HELD, error=error, held_for=admission.retry_in)
    before = len(sent)
    answered_early: list[bool] = []  # what the breaker said when the host asked for payment

    async def asked_for_payment() -> None:
        # The host answered: what the delivery waits for now is its payment, which must
        # not count against the host as a request awaiting its answer.
        if policy is not None and not answered_early:
            report = Report(key, policy, False, admission)
            answered_early.append(await breaker_turns.record(breakers, report))

    if job.ticket is not None:
        ending = await _ticketed_attempt(job, job.ticket, url, transport, sent, asked_for_payment)
    else:
        try:
            response = await _signed_post(transport, job, url, sent)
        except BlockedAddress as error:
            ending = _Ending(AttemptResult.REFUSED, error=str(error), failure="blocked")
        except TransportError as error:
            ending = _Ending(AttemptResult.RETRY, error=str(error), failure=_failure(error))
        else:
            ending = _judge(response)
    # A retry decided before any request (the Lightning node failed to pay) is not the
    # host's failure: its breaker does not count it.
    asked = len(sent) > before
    failed = ending.result is AttemptResult.RETRY and asked and server_failed(ending.status)
    throttle = throttle_for(ending.status, ending.retry_after)
    if policy is not None:
        report = Report(key, policy, failed, admission, throttle, answered=asked)
        if await breaker_turns.record(breakers, report) or any(answered_early):
            ending = ending._replace(released=target.host)
    if rates is not None:
        hold = pacing.slow_down_for(ending.status, ending.retry_after, throttle)
        closed = admission is not None and admission.kind == "probe" and asked and not failed
        await pacing.note(rates, target.host, hold=hold, probe_closed=closed and not hold)
    return ending


async def _ticketed_attempt(
    job: Job,
    ticket: Ticket,
    url: str,
    transport: Transport,
    sent: list[str],
    asked_for_payment: Callable[[], Awaitable[None]],
) -> _Ending:
    """An attempt that an extension takes part in: its ticket makes the POST.  A ``402``
    calls ``asked_for_payment`` before the ticket sees it (and may pay)."""
    size = len(job.message.body)

    async def post(authorization: str | None) -> Response:
        response = await _signed_post(transport, job, url, sent, authorization)
        if response.status == 402:
            await asked_for_payment()
        return response

    done = await ticket.exchange(url, size, post)
    if done.response is not None:
        return _judge(done.response)._replace(report=done.report)
    assert done.result is not None
    return _Ending(done.result, done.status, done.error, held_for=done.held_for, report=done.report)

"""The sending side's half of paid push: present a token, pay a stored attempt, read a 402.

:func:`exchange` replaces the plain POST of an attempt when ``OUTBOX_PAYMENTS`` is set.
It never pays an invoice that is not already stored and committed.  On a host known to
charge per message, the attempt stores the checked challenge of its ``402`` itself and
pays it at once (:func:`~.settling.store_and_settle`); elsewhere a ``402`` only yields a
checked :class:`~django_outbox.payments.reports.Challenge` for the recorder to store (and
the delivery comes straight back, see ``AttemptResult.PAYING``).  A stored attempt is
paid at the delivery's next claim, after the node is asked whether it already was::

    claim ── open attempt? ── pending ── lookup ── complete ──────► preimage ─┐
               │                 │          ├── pending ── retry later        │
               │                 │          └── failed/unknown ── pay ──────► │
               │               paid ───────────────────────────────────────► │
               └── kept token for the host? ──────────────────────────────► POST
                                                                     (Authorization: L402 ...)
    2xx: token used and kept.  402 (or 401 naming L402): token refused, the new
    challenge is checked and reported.  Anything else is judged as any answer.

A client that times out, or answers what cannot be trusted, leaves the attempt
``pending``: the next attempt asks ``lookup`` again, and pays only if the node says
the payment failed or never started.

Node calls run on the process's payment threads (:mod:`~django_outbox.payments.threads`),
never on the loop's default executor.  A payment starts only while what is left of the
delivery's lease covers it and the request after it
(:func:`~.settling.payment_seconds`): else the
delivery is given back, unsent and unpaid, for a claim with a fresh lease.

On a host not known to charge per message, for ``HOLD_WHILE_PAYING`` seconds after
one of its deliveries met a payable 402 (or until one of its deliveries is accepted
with a token it paid for there), a process sends nothing to that host without a token
or an attempt of its own: until the recorder has stored that challenge (and claims
park the others), each such request would only meet a 402 to decode and hold.  They
are held without a request.  A 402 met meanwhile without a token, or while the claim
knew the host was being paid for another delivery, is held without decoding its
invoice.  A 402 answering a kept token is decoded: it tells the ledger that the host
charges per message.  On a host known to (``PaymentJob.per_message``) every delivery
the claim let go meets its own 402 and pays its own invoice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from threading import Lock
from typing import Any, TypeVar

from django.utils.module_loading import import_string

from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.extensions import Exchange, Post
from django_outbox.payments.challenge import SCHEMES, parse_challenge
from django_outbox.payments.clients import PaymentClient
from django_outbox.payments.errors import PaymentRefused
from django_outbox.payments.invoices import check_challenge
from django_outbox.payments.reports import (
    MET_402_LATELY,
    PAYING_ELSEWHERE,
    Challenge,
    Change,
    KeptToken,
    OpenAttempt,
)
from django_outbox.payments.settings import PaymentSettings
from django_outbox.payments.settling import Trail, settle_open, store_and_settle
from django_outbox.payments.threads import payment_threads
from django_outbox.transport import BlockedAddress, Response, TransportError
from django_outbox.transport.target import parse_target
from django_outbox.values.claimed import ClaimedRow
from django_outbox.values.outcomes import AttemptResult

T = TypeVar("T")


@dataclass(frozen=True)
class PaymentJob:
    """What a claim hands a sending thread for paying: the settings, the process's client,
    when the delivery's lease ends (monotonic time), the delivery's open attempt and the
    host's kept token (either may be None), and whether the host is being paid for
    another delivery."""

    settings: PaymentSettings
    client: PaymentClient = field(repr=False)
    #: Monotonic time at which the delivery's lease ends, as the claim knew it.
    lease_ends: float
    open: OpenAttempt | None = None
    token: KeptToken | None = None
    #: Whether another delivery's payment to the host was under way at the claim.
    paying: bool = False
    #: Whether the host is known to charge per message: every delivery there pays its
    #: own invoice, so a 402 met there is a payment to make, never a reason to wait.
    per_message: bool = False
    #: The claimed delivery: on a host that charges per message, its attempt stores the
    #: challenge it meets and pays it at once (None: a job made by hand, which does not).
    row: ClaimedRow | None = None
    #: The actor whose message it is, whose daily budget pays (with ``row``).
    sender: str = ""

    @property
    def urgent(self) -> bool:
        """Whether it carries a payment attempt of its own (to pay, or paid), or will make
        one (its host charges per message): it goes first, on the engine's urgent loop,
        and in no host's line.  A paid message does not wait behind unpaid ones, and what
        bounds its host's payments is the ledger's slots (``MAX_PARALLEL_PER_HOST``), not
        ``OUTBOX_PER_HOST``: most of its time is the node's, not the host's."""
        return self.open is not None or self.per_message

    async def exchange(self, url: str, size: int, post: Post) -> Exchange:
        """The attempt, paying and presenting tokens: :func:`exchange`."""
        return await exchange(self, url, size, post)


_clients: dict[int, tuple[PaymentSettings, PaymentClient]] = {}
_clients_lock = Lock()
#: Host -> monotonic time until which this process sends no delivery there without
#: a token: one of its deliveries met a payable 402 there, which the recorder is
#: storing as the host's pending attempt (after which the claims park the others).
_challenged: dict[str, float] = {}


def met_402_lately(host: str) -> bool:
    """Whether a delivery of this process met a payable 402 at ``host`` less than
    ``HOLD_WHILE_PAYING`` seconds ago (the recorder may still be storing its challenge),
    and no delivery of it was accepted there since with a token it paid for."""
    return _challenged.get(host, 0.0) > time.monotonic()


def payment_client(settings: PaymentSettings) -> PaymentClient:
    """The process's payment client for ``settings``, made once (clients keep sessions)."""
    with _clients_lock:
        made = _clients.get(0)
        if made is not None and made[0] == settings:
            return made[1]
    factory: Any = settings.client
    if isinstance(factory, str):
        try:
            factory = import_string(factory)
        except ImportError as error:
            raise OutboxConfigurationError(
                f"OUTBOX_PAYMENTS['CLIENT']: cannot import {settings.client!r}: {error}"
            ) from None
    client = factory(**settings.options)
    if not isinstance(client, PaymentClient):
        raise OutboxConfigurationError(
            "OUTBOX_PAYMENTS['CLIENT'] made an object without pay() and lookup()"
        )
    with _clients_lock:
        _clients[0] = (settings, client)
    return client


def names_l402(response: Response) -> bool:
    """Whether a 401 answer challenges for L402 (a token refused as 402 would be)."""
    value = response.headers.get("WWW-Authenticate") or ""
    return any(scheme.lower() in value.lower() for scheme in SCHEMES)


def _host(url: str) -> str:
    """The host of ``url`` as the transport reads it (the one parser of inbox URLs)."""
    return parse_target(url).host


def _wants_payment(response: Response) -> bool:
    return response.status == 402 or (response.status == 401 and names_l402(response))


def challenge_of(job: PaymentJob, url: str, size: int, response: Response) -> Exchange | Challenge:
    """The checked challenge of a ``402`` to ``url`` for a ``size``-byte body, or the
    refusal (nothing is paid: malformed, expired, wrong network, over price...)."""
    settings = job.settings
    try:
        challenge = parse_challenge(response.headers.get("WWW-Authenticate") or "")
        terms = check_challenge(
            challenge,
            network=settings.network,
            max_price_msat=settings.max_price_msat,
            size=size,
            rate_msat_per_byte=settings.rate_msat_per_byte,
            minimum_msat=settings.minimum_msat,
            affordance=settings.expiry_affordance,
        )
    except PaymentRefused as refusal:
        return Exchange(
            result=AttemptResult.REFUSED,
            status=response.status,
            error=f"payment refused: {refusal}"[:500],
        )
    return Challenge(
        destination=url,
        scheme=challenge.scheme,
        payment_hash=terms.invoice.payment_hash,
        amount_msat=terms.amount_msat,
        pay_amount_msat=terms.pay_amount_msat,
        invoice_expires_at=float(terms.invoice.expires_at),
        invoice=challenge.invoice,
        macaroon=challenge.macaroon,
    )


async def _on_payment_threads(job: PaymentJob, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` on the process's payment threads (it asks the node, or stores)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(payment_threads(job.settings), call, *args)


async def exchange(job: PaymentJob, url: str, size: int, post: Post) -> Exchange:
    """One attempt at ``url`` with payments: ``post(authorization)`` sends the request
    (or none, held, when this process met a payable 402 there a moment ago).

    On a host that charges per message, a claimed delivery without an attempt stores the
    challenge its 402 brings and pays it (:func:`~.settling.store_and_settle`), then
    sends again with the token, in this one attempt.  The payment client blocks (it asks
    a Lightning node): it runs on the payment threads, never on the loop or its default
    executor.
    """
    trail = Trail(job.per_message)
    authorization: str | None = None
    presented: tuple[int, Change] | None = None  # the attempt whose token goes, and if refused
    # A token is a bearer secret: it goes only where it was bought.
    own = job.open if job.open is not None and job.open.destination == url else None
    host = _host(url)
    token = job.token if job.token is not None and job.token.host == host else None
    if own is not None:
        settled = await _on_payment_threads(job, settle_open, job, own, trail)
        if isinstance(settled, Exchange):
            return settled
        if settled is not None:
            authorization, presented = settled, (own.attempt_id, Change.REJECTED)
    if authorization is None and token is not None:
        authorization = token.authorization()
        presented = (token.attempt_id, Change.RETIRED)
    if own is None and token is None and not job.per_message and met_402_lately(host):
        return trail.ends(
            AttemptResult.HELD,
            MET_402_LATELY,
            held_for=job.settings.hold_while_paying,
        )
    while True:  # twice at most: a 402 met without an attempt is paid, and sent again
        try:
            response = await post(authorization)
        except BlockedAddress as error:
            return trail.ends(AttemptResult.REFUSED, str(error))
        except TransportError as error:
            return trail.ends(AttemptResult.RETRY, str(error))
        answered = _answered(job, url, size, response, trail, own, presented)
        if not isinstance(answered, Challenge):
            return answered
        if own is not None or job.row is None or not job.per_message:
            if not (job.per_message or (presented is not None and own is None)):
                _challenged[host] = time.monotonic() + job.settings.hold_while_paying
            asked = (
                f"payment required: {answered.amount_msat} msat "
                f"(invoice {answered.payment_hash[:12]})"
            )
            return Exchange(
                result=AttemptResult.PAYING,
                status=response.status,
                error=asked,
                report=trail.report(answered),
            )
        paid = await _on_payment_threads(job, store_and_settle, job, answered, trail)
        if paid is None:  # its invoice ran out before it was paid: meet the 402 again
            ran_out = "payment required: its invoice ran out before it could be paid"
            return trail.ends(AttemptResult.PAYING, ran_out, status=response.status)
        if isinstance(paid, Exchange):  # the host answered 402: not a server failure
            return replace(paid, status=response.status)
        own, authorization = paid
        presented = (own.attempt_id, Change.REJECTED)


def _answered(
    job: PaymentJob,
    url: str,
    size: int,
    response: Response,
    trail: Trail,
    own: OpenAttempt | None,
    presented: tuple[int, Change] | None,
) -> Exchange | Challenge:
    """What an answer ends the exchange with, or the checked challenge of its 402 to pay.

    The token presented is noted used (2xx) or refused (a 402).  A 402 met while another
    delivery pays the host is held without decoding its invoice."""
    if presented is not None:
        attempt_id, refused = presented
        if 200 <= response.status < 300:
            trail.add(attempt_id, Change.USED)
            if own is not None and attempt_id == own.attempt_id:
                trail.paid_msat = own.amount_msat
                _challenged.pop(_host(url), None)  # that payment is over
        elif _wants_payment(response):
            trail.add(attempt_id, refused, reason=f"HTTP {response.status} to the paid token")
    if not _wants_payment(response):
        return Exchange(response=response, report=trail.report())
    refused_token = presented is not None and own is None
    if (
        own is None
        and not (job.per_message or refused_token)
        and (job.paying or met_402_lately(_host(url)))
    ):
        # Its invoice would be decoded (milliseconds) only for the recorder to hold it:
        # the host's payment under way is another delivery's.
        wait = job.settings.hold_while_paying
        return trail.ends(
            AttemptResult.HELD, PAYING_ELSEWHERE, status=response.status, held_for=wait
        )
    found = challenge_of(job, url, size, response)
    if isinstance(found, Exchange):
        return replace(found, report=trail.report())
    return found

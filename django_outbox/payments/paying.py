"""The sending side's half of paid push: present a token, pay a stored attempt, read a 402.

:func:`exchange` replaces the plain POST of an attempt when ``OUTBOX_PAYMENTS`` is set.
It never pays an invoice that is not already stored: a ``402`` only yields a checked
:class:`~django_outbox.payments.reports.Challenge` for the recorder to store (and the
delivery comes straight back, see ``AttemptResult.PAYING``).  A stored attempt is
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
delivery's lease covers it and the request after it (:func:`payment_seconds`): else the
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
import hashlib
import time
from dataclasses import dataclass, field, replace
from threading import Lock
from typing import Any

from django.utils.module_loading import import_string

from django_outbox.conf import conf
from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.extensions import Exchange, Post
from django_outbox.payments.challenge import SCHEMES, parse_challenge
from django_outbox.payments.clients import Payment, PaymentClient, PaymentState
from django_outbox.payments.errors import (
    PaymentClientError,
    PaymentFailed,
    PaymentRefused,
    PreimageMismatch,
)
from django_outbox.payments.invoices import check_challenge
from django_outbox.payments.reports import (
    MET_402_LATELY,
    PAYING_ELSEWHERE,
    Challenge,
    Change,
    KeptToken,
    OpenAttempt,
    PaymentReport,
    Settlement,
)
from django_outbox.payments.settings import PaymentSettings
from django_outbox.payments.threads import payment_threads
from django_outbox.transport import BlockedAddress, Response, TransportError
from django_outbox.transport.target import parse_target
from django_outbox.values.outcomes import AttemptResult

#: Node calls one payment step may make: a lookup, the payment, and the lookup that a
#: payment the node refuses ("already paid", "in transition") asks for.
NODE_CALLS = 3
#: Seconds one node call is taken to last at most when the client declares no ``timeout``.
ASSUMED_TIMEOUT = 60.0
#: Seconds kept after the request for the recorder to save its outcome (as for every send).
SAVE_MARGIN = 10.0


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

    @property
    def urgent(self) -> bool:
        """Whether it carries a payment attempt of its own (to pay, or paid): it goes
        first, on the engine's urgent loop, and in no host's line.  A paid message does
        not wait behind unpaid ones, and what bounds its host's payments is the ledger's
        slots (``MAX_PARALLEL_PER_HOST``), not ``OUTBOX_PER_HOST``: most of its time is
        the node's, not the host's."""
        return self.open is not None

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


def payment_seconds(client: PaymentClient) -> float:
    """The longest a payment step and the request after it may take, in seconds:
    :data:`NODE_CALLS` calls of the client's ``timeout`` (:data:`ASSUMED_TIMEOUT` if it
    declares none), two knocks of ``OUTBOX_TOTAL_TIMEOUT`` and :data:`SAVE_MARGIN`."""
    timeout = getattr(client, "timeout", None)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        timeout = ASSUMED_TIMEOUT
    return NODE_CALLS * float(timeout) + 2 * conf.TOTAL_TIMEOUT + SAVE_MARGIN


def _lease_refusal(job: PaymentJob, trail: _Trail) -> Exchange | None:
    """Why the payment step must not start now, or None: the delivery's lease cannot
    cover it (given back unpaid, for a claim with a fresh lease), or no lease could
    (``OUTBOX_LEASE_SECONDS`` too short for the client: retried, and check E017 says so)."""
    needed, lease = payment_seconds(job.client), conf.LEASE_SECONDS
    if needed > lease:
        error = (
            f"internal: a payment and its request may take {needed:g} s, more than the "
            f"{lease:g} s lease (OUTBOX_LEASE_SECONDS)"
        )
        return trail.ends(AttemptResult.RETRY, error)
    left = job.lease_ends - time.monotonic()
    if left < needed:
        error = (
            f"released: {max(0.0, left):.0f} s left of its lease cannot cover a payment "
            f"and its request ({needed:g} s)"
        )
        return trail.ends(AttemptResult.RELEASED, error)
    return None


def names_l402(response: Response) -> bool:
    """Whether a 401 answer challenges for L402 (a token refused as 402 would be)."""
    value = response.headers.get("WWW-Authenticate") or ""
    return any(scheme.lower() in value.lower() for scheme in SCHEMES)


def _host(url: str) -> str:
    """The host of ``url`` as the transport reads it (the one parser of inbox URLs)."""
    return parse_target(url).host


def _wants_payment(response: Response) -> bool:
    return response.status == 402 or (response.status == 401 and names_l402(response))


class _Trail:
    """The settlements of one exchange, gathered as it goes."""

    def __init__(self) -> None:
        self.settlements: list[Settlement] = []
        self.paid_msat = 0

    def add(self, attempt_id: int, change: Change, **details: Any) -> None:
        self.settlements.append(Settlement(attempt_id, change, **details))

    def report(self, challenge: Challenge | None = None) -> PaymentReport | None:
        if not self.settlements and challenge is None:
            return None
        return PaymentReport(tuple(self.settlements), challenge, self.paid_msat)

    def ends(self, result: AttemptResult, error: str, **extra: Any) -> Exchange:
        return Exchange(result=result, error=error, report=self.report(), **extra)


def _checked(payment: Payment, attempt: OpenAttempt) -> str:
    """The payment's preimage as hex, if it is the attempt's; else :class:`PreimageMismatch`."""
    if (
        payment.payment_hash.lower() != attempt.payment_hash
        or hashlib.sha256(payment.preimage).hexdigest() != attempt.payment_hash
    ):
        raise PreimageMismatch(f"the client's preimage is not that of {attempt.payment_hash[:16]}")
    return payment.preimage.hex()


def _settle_open(job: PaymentJob, trail: _Trail) -> str | Exchange | None:
    """Bring the delivery's open attempt to a preimage: the ``Authorization`` to send,
    an :class:`Exchange` that ends the attempt, or None (nothing usable: send bare)."""
    attempt, client, settings = job.open, job.client, job.settings
    assert attempt is not None
    now = time.time()
    if attempt.state == "paid" and attempt.preimage:
        return attempt.authorization(attempt.preimage)
    refusal = _lease_refusal(job, trail)
    if refusal is not None:
        return refusal
    try:
        status = client.lookup(attempt.payment_hash)
        if status.state is PaymentState.PENDING:
            error = f"payment {attempt.payment_hash[:16]} is in flight; asking again later"
            return trail.ends(AttemptResult.RETRY, error)
        if status.state is PaymentState.COMPLETE and status.payment is not None:
            payment = status.payment
        elif now >= attempt.expires_at or now + settings.expiry_affordance >= (
            attempt.invoice_expires_at
        ):
            trail.add(attempt.attempt_id, Change.FAILED, reason="the invoice ran out unpaid")
            return None
        else:
            payment = client.pay(attempt.invoice, attempt.pay_amount_msat, settings.max_fee_msat)
        preimage = _checked(payment, attempt)
    except PaymentFailed as failure:
        trail.add(attempt.attempt_id, Change.FAILED, reason=str(failure)[:500])
        return trail.ends(AttemptResult.RETRY, f"payment failed: {failure.reason[:200]}")
    except PaymentRefused as refusal:
        trail.add(attempt.attempt_id, Change.FAILED, reason=str(refusal)[:500])
        return trail.ends(AttemptResult.REFUSED, f"payment refused: {refusal}")
    except PaymentClientError as error:
        return trail.ends(AttemptResult.RETRY, f"payment client: {error}"[:500])
    trail.add(attempt.attempt_id, Change.PAID, preimage=preimage, fee_msat=payment.fee_msat)
    if now >= attempt.expires_at:
        reason = "paid, but the token's lifetime ended before it was used"
        trail.add(attempt.attempt_id, Change.REJECTED, reason=reason)
        return None
    return attempt.authorization(preimage)


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


async def exchange(job: PaymentJob, url: str, size: int, post: Post) -> Exchange:
    """One attempt at ``url`` with payments: ``post(authorization)`` sends the request
    (or none, held, when this process met a payable 402 there a moment ago).

    The payment client blocks (it asks a Lightning node): it runs on the payment
    threads, never on the loop or its default executor.
    """
    trail = _Trail()
    authorization: str | None = None
    presented: tuple[int, Change] | None = None  # the attempt whose token goes, and if refused
    # A token is a bearer secret: it goes only where it was bought.
    own = job.open if job.open is not None and job.open.destination == url else None
    host = _host(url)
    token = job.token if job.token is not None and job.token.host == host else None
    if own is not None:
        loop = asyncio.get_running_loop()
        threads = payment_threads(job.settings)
        settled = await loop.run_in_executor(threads, _settle_open, replace(job, open=own), trail)
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
    try:
        response = await post(authorization)
    except BlockedAddress as error:
        return trail.ends(AttemptResult.REFUSED, str(error))
    except TransportError as error:
        return trail.ends(AttemptResult.RETRY, str(error))
    if presented is not None:
        attempt_id, refused = presented
        if 200 <= response.status < 300:
            trail.add(attempt_id, Change.USED)
            if own is not None and attempt_id == own.attempt_id:
                trail.paid_msat = own.amount_msat
                _challenged.pop(host, None)  # that payment is over
        elif _wants_payment(response):
            trail.add(attempt_id, refused, reason=f"HTTP {response.status} to the paid token")
    if not _wants_payment(response):
        return Exchange(response=response, report=trail.report())
    refused_token = presented is not None and own is None
    if (
        own is None
        and not (job.per_message or refused_token)
        and (job.paying or met_402_lately(host))
    ):
        # Its invoice would be decoded (milliseconds) only for the recorder to hold it:
        # the host's payment under way is another delivery's.
        wait = job.settings.hold_while_paying
        return trail.ends(
            AttemptResult.HELD, PAYING_ELSEWHERE, status=response.status, held_for=wait
        )
    found = challenge_of(job, url, size, response)
    if isinstance(found, Exchange):
        return Exchange(
            result=found.result, status=found.status, error=found.error, report=trail.report()
        )
    if not (job.per_message or refused_token):
        _challenged[host] = time.monotonic() + job.settings.hold_while_paying
    asked = f"payment required: {found.amount_msat} msat (invoice {found.payment_hash[:12]})"
    return Exchange(
        result=AttemptResult.PAYING,
        status=response.status,
        error=asked,
        report=trail.report(found),
    )

"""What came of one attempt, and which answers mean trying again cannot help."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from django_outbox.values.claimed import ClaimedRow, MessageData


def permanent_status(status: int) -> bool:
    """The default ``OUTBOX_PERMANENT_STATUS``: 501, and any 4xx but 401, 408 and 429.

    These answers will not change if the same request is sent again, as
    Mastodon judges them; 401 is kept retryable because the other signature
    scheme or a refreshed key may be accepted, 408 and 429 ask to come back.
    """
    return status == 501 or (400 <= status < 500 and status not in (401, 408, 429))


def server_failed(status: int | None) -> bool:
    """Whether an answer says the server is not working: none, 5xx or 408.

    Only these count towards a circuit breaker and a host's failure days; an
    answer that will not change (a 404, a 410) is the server working, and a ``429``
    is a working server asking to be left alone for a while (:func:`throttled`).
    """
    return status is None or status >= 500 or status == 408


def throttled(status: int | None) -> bool:
    """Whether an answer is throttling (``429 Too Many Requests``): not a failure; it
    holds the host for the time asked."""
    return status == 429


#: ``Outcome.failure`` of an attempt that went wrong on our side, not the host's: an
#: exception in the worker, an application function that raised or did not answer, an
#: outcome that could not be recorded.  Retried soon, never counted against the host.
INTERNAL = "internal"


class AttemptResult(StrEnum):
    """How an attempt ended, which decides the row's next state."""

    DELIVERED = "delivered"
    REFUSED = "refused"
    SKIPPED = "skipped"
    RETRY = "retry"
    HELD = "held"
    RELEASED = "released"
    EXPIRED = "expired"
    #: Tried again at once: what the host asked for first (a 402's invoice) is stored,
    #: to be paid by the next attempt.
    PAYING = "paying"


#: Results of claims whose attempt is given back: nothing was sent, or the host asked for
#: something first (an extension bounds those tries itself).
UNSPENT_RESULTS = frozenset(
    (
        AttemptResult.HELD,
        AttemptResult.EXPIRED,
        AttemptResult.RELEASED,
        AttemptResult.SKIPPED,
        AttemptResult.PAYING,
    )
)


class AttemptReport(Protocol):
    """What an extension that took part in an attempt reports of it, for its own
    :meth:`~django_outbox.extensions.Extension.record`."""

    @property
    def paid_msat(self) -> int:
        """What the attempt cost, in millisatoshi (``delivery_settled``'s ``amount_msat``)."""


@dataclass(frozen=True)
class Outcome:
    """The result of one attempt at one claimed delivery.

    ``row`` and ``message`` are what the claim returned and what was sent;
    ``retry_after`` is what the server asked with ``Retry-After`` and
    ``held_for`` how long an open breaker (or an extension) asks to wait, both in
    seconds.  The next four say what the attempt did, for its history and the
    metrics; ``report`` what an extension that took part has to record;
    ``released`` the hosts whose held deliveries may come back now.
    """

    row: ClaimedRow
    message: MessageData
    result: AttemptResult
    status: int | None = None
    error: str = ""
    retry_after: float | None = None
    held_for: float | None = None
    #: When the attempt started (seconds since the epoch); 0.0 when none was made.
    started_at: float = 0.0
    #: Seconds its requests took in all.
    duration: float = 0.0
    #: The signature scheme of each request made, in order (two after a second knock).
    schemes: tuple[str, ...] = ()
    #: How a request ended without an answer: ``timeout``, ``connect``, ``blocked``
    #: or ``error``; :data:`INTERNAL` when the worker failed; ``""`` when an answer came
    #: or no request was made.
    failure: str = ""
    report: AttemptReport | None = None
    released: tuple[str, ...] = ()

    @property
    def host_failed(self) -> bool:
        """Whether this outcome counts against its host (breaker, failure days): a
        retry after no answer, a 5xx or a 408; not a 429 (throttling), nor a failure of
        our own."""
        return (
            self.result is AttemptResult.RETRY
            and self.failure != INTERNAL
            and server_failed(self.status)
        )


def internal_error(
    row: ClaimedRow, message: MessageData, what: str, error: BaseException | str
) -> Outcome:
    """A retry of ``row`` because the worker failed at ``what``: no request counts, and
    no extension's report goes with it (an extension finds again what it did)."""
    detail = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return Outcome(
        row, message, AttemptResult.RETRY, error=f"internal: {what}: {detail}", failure=INTERNAL
    )

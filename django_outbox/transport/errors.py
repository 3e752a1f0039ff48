"""The transport's errors, and the translation of low-level failures into them.

A request attempt fails in one of three steps, which decides what the failure
means: while *connecting* (TCP and TLS: nothing was sent, so another address may
be tried), while *sending* the request, or while *receiving* the answer.
"""

from __future__ import annotations

import ssl
from http.client import HTTPException
from typing import Literal

from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, ReadTimeoutError
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import SSLError as Urllib3SSLError

from django_outbox.exceptions import OutboxError
from django_outbox.safe_text import one_line

#: Where an attempt failed: see the module docstring.
Step = Literal["connect", "send", "receive"]

#: What an attempt may raise below the transport, to be translated.
LOW_LEVEL_ERRORS = (OSError, HTTPException, Urllib3Error)

_MESSAGE_LIMIT = 200


class TransportError(OutboxError):
    """A delivery request failed before a complete HTTP response arrived.

    ``str(error)`` is a short message fit for a ``last_error`` column: whatever text
    a server or resolver put in it, it is one printable line (see :func:`short`).
    """

    def __init__(self, message: str) -> None:
        super().__init__(short(message))


class BlockedAddress(TransportError):
    """The host resolves to an address deliveries must not reach (loopback, private...).

    Retrying does not help unless DNS changes, so callers may treat it as permanent.
    """


class ResolveError(TransportError):
    """The host name could not be resolved to any address."""


class ConnectFailed(TransportError):
    """No connection could be opened (refused, unreachable, reset during connect)."""


class TLSFailed(ConnectFailed):
    """The TLS handshake or the certificate check failed."""


class TimedOut(TransportError):
    """The connect timeout or the request's total time budget ran out."""

    #: True when time ran out while connecting, before any byte of the request was sent.
    during_connect: bool = False


class ProtocolFailed(TransportError):
    """The server broke HTTP (closed mid-response, malformed reply) or the URL is unusable."""


def out_of_time(total_timeout: float, *, during_connect: bool = False) -> TimedOut:
    """The error for a request that used up its total time budget."""
    error = TimedOut(f"timed out: no complete response within {total_timeout:g} s")
    error.during_connect = during_connect
    return error


def translate(
    exc: BaseException,
    step: Step,
    where: str,
    *,
    expired: bool,
    timeouts: tuple[float, float, float],
) -> TransportError:
    """Map a urllib3/http.client/socket failure of ``step`` onto the error classes.

    ``where`` names the host and address for messages; ``expired`` says the watchdog
    cut the request; ``timeouts`` are the transport's (connect, read, total) seconds.
    """
    if isinstance(exc, TransportError):
        return exc
    connect_timeout, read_timeout, total_timeout = timeouts
    connecting = step == "connect"
    if expired:
        return out_of_time(total_timeout, during_connect=connecting)
    reason = _root_cause(exc)
    if connecting:
        # Checked first: urllib3's NewConnectionError subclasses ConnectTimeoutError.
        if isinstance(reason, NewConnectionError | ConnectionRefusedError):
            return ConnectFailed(f"connect to {where} failed: {_describe(reason)}")
        if isinstance(reason, ConnectTimeoutError | TimeoutError):
            error = TimedOut(f"connect to {where} timed out after {connect_timeout:g} s")
            error.during_connect = True
            return error
    elif isinstance(reason, ReadTimeoutError | TimeoutError):
        if step == "send":
            return TimedOut(f"timed out sending to {where}")
        return TimedOut(f"timed out waiting for {where}: {read_timeout:g} s without a byte")
    if isinstance(reason, Urllib3SSLError | ssl.SSLError | ssl.CertificateError):
        return TLSFailed(f"TLS failed with {where}: {_describe(reason)}")
    if connecting:
        return ConnectFailed(f"connect to {where} failed: {_describe(reason)}")
    return ProtocolFailed(f"{where}: {_describe(reason)}")


def _root_cause(exc: BaseException) -> BaseException:
    """Unwrap urllib3's wrapper exceptions down to the informative one."""
    for _ in range(8):
        inner = getattr(exc, "reason", None)
        if not isinstance(inner, BaseException):
            nested = [arg for arg in exc.args if isinstance(arg, BaseException)]
            inner = nested[-1] if nested else None
        if inner is None or inner is exc:
            break
        exc = inner
    return exc


def _describe(exc: BaseException) -> str:
    """A short human description of a low-level error."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return str(exc.verify_message or exc.reason or exc)
    if isinstance(exc, NewConnectionError) and isinstance(exc.__cause__, OSError):
        exc = exc.__cause__
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    text = str(exc) or type(exc).__name__
    return text.split(": ", 1)[-1] if text.startswith("<") else text


def short(message: str) -> str:
    """``message`` on one printable line, cut to fit a ``last_error`` column comfortably.

    Server-controlled text (a malformed status line, a TLS alert) may carry CR, LF
    and other control characters; they are escaped, never passed on.
    """
    return one_line(message, _MESSAGE_LIMIT)

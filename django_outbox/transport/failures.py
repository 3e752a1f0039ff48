"""The transport's errors.

A request fails while *connecting* (TCP and TLS: nothing was sent, so another
address may be tried: :class:`ConnectFailed`, or :class:`TimedOut` with
``during_connect``), or later, once the request may have reached the server.
"""

from __future__ import annotations

import os
import ssl

from django_outbox.exceptions import OutboxError
from django_outbox.values.safe_text import one_line

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


def describe(exc: BaseException) -> str:
    """A short human description of a low-level (socket, TLS) error."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return str(exc.verify_message or exc.reason or exc)
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno).lower()  # asyncio's own strerror names the address
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

"""The HTTP client that POSTs signed bodies to remote inboxes.

One :class:`Transport` serves every thread of a worker process.  Three properties
matter more than convenience here:

* **It connects to the address it checked.**  The host is resolved and vetted by
  :func:`~django_outbox.addresses.resolve_checked`; the connection pool is then built
  for that IP, while the ``Host`` header, TLS SNI and certificate check keep the real
  host name.  Pools are keyed by (scheme, IP, port, host name), so two names served
  from one IP never share a TLS identity.
* **Nothing outlives the total time budget.**  A process-wide watchdog thread keeps a
  heap of request deadlines and shuts down the socket of any request still running
  past its deadline, so a server trickling one byte per second cannot hold a worker
  slot (per-read socket timeouts alone would let it); connect and TLS handshake are
  bounded by socket timeouts cut to the remaining budget.  See ``_transport_pool``.
* **Bounded reads.**  At most ``max_response_bytes`` of a body are read; a longer
  body is cut off by closing the connection instead of draining it.

Requests go straight to a shared, thread-safe ``requests`` adapter (urllib3 pools
are locked).  ``Session.send`` is not used on purpose: with ``allow_redirects=False``
it still reads the *whole* body of a 3xx response before returning, uncapped.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache
from urllib.parse import urlsplit

import requests
from requests.models import PreparedRequest
from requests.structures import CaseInsensitiveDict
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError, ReadTimeoutError
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import SSLError as Urllib3SSLError

from django_outbox._transport_pool import (
    Entry,
    PinnedRequest,
    PinningAdapter,
    shared_ssl_context,
    watchdog,
)
from django_outbox.addresses import (
    BlockedAddress,
    IPNetwork,
    ResolveError,
    Resolver,
    TransportError,
    parse_networks,
    resolve_checked,
)

__all__ = [
    "BlockedAddress",
    "ConnectFailed",
    "ProtocolFailed",
    "ResolveError",
    "Response",
    "TLSFailed",
    "TimedOut",
    "Transport",
    "TransportError",
    "retry_after_seconds",
]

_READ_CHUNK = 64 * 1024
_MAX_ADDRESSES_TRIED = 3
_DNS_CACHE_SIZE = 4096
_MESSAGE_LIMIT = 200


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


@dataclass(frozen=True)
class Response:
    """What an inbox answered: status, case-insensitive headers, the first bytes of body.

    ``body`` holds at most the transport's ``max_response_bytes``; ``elapsed`` is the
    wall time of the whole exchange in seconds, from resolution to the last body byte.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes
    elapsed: float


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Parse a ``Retry-After`` header (delta-seconds or HTTP-date) into seconds from ``now``.

    Returns None when the header is absent or unparseable, so the caller falls back to
    its own backoff; a date in the past or a negative delay gives 0.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.lstrip("+-").isdigit():
        try:
            return max(0.0, float(int(text)))
        except (ValueError, OverflowError):
            return None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(UTC)
    if current.tzinfo is None:
        current = current.replace(tzinfo=UTC)
    return max(0.0, (when - current).total_seconds())


@dataclass(frozen=True)
class _Target:
    """The parts of an inbox URL the transport needs, computed once per URL."""

    url: str
    scheme: str
    host: str
    port: int
    host_header: str


@lru_cache(maxsize=4096)
def _target(url: str) -> _Target:
    """Normalise ``url`` the way requests would (IDNA, quoting) and split it."""
    prepared = PreparedRequest()
    prepared.prepare_url(url, None)
    assert prepared.url is not None
    parts = urlsplit(prepared.url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    port = parts.port or (443 if scheme == "https" else 80)
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    default = port == (443 if scheme == "https" else 80)
    return _Target(prepared.url, scheme, host, port, shown if default else f"{shown}:{port}")


class Transport:
    """A thread-safe HTTP client for inbox deliveries; see the module docstring.

    ``pool_per_host`` is how many idle keep-alive connections each (IP, port, host)
    keeps; more concurrent requests to one host still proceed, on extra connections
    closed after use, so keep the worker's per-host concurrency at or below it.
    ``max_pools`` bounds how many hosts keep idle connections (least recently used
    go first).  ``allowed_networks`` takes networks or CIDR strings.  ``ca_bundle``
    replaces the system trust store, ``resolver`` replaces DNS (tests); the SSRF check
    applies to its answers all the same.  ``dns_ttl`` is how long checked addresses
    are reused.
    """

    def __init__(
        self,
        *,
        user_agent: str,
        connect_timeout: float = 5.0,
        total_timeout: float = 30.0,
        read_timeout: float = 10.0,
        max_response_bytes: int = 1 << 20,
        allowed_networks: Iterable[IPNetwork | str] = (),
        pool_per_host: int = 4,
        max_pools: int = 1024,
        ca_bundle: str | None = None,
        resolver: Resolver | None = None,
        dns_ttl: float = 60.0,
    ) -> None:
        if min(connect_timeout, total_timeout, read_timeout) <= 0 or max_response_bytes < 0:
            raise ValueError("timeouts must be positive and max_response_bytes non-negative")
        self.user_agent = user_agent
        self.connect_timeout = connect_timeout
        self.total_timeout = total_timeout
        self.read_timeout = read_timeout
        self.max_response_bytes = max_response_bytes
        self.allowed_networks = tuple(
            parse_networks([n])[0] if isinstance(n, str) else n for n in allowed_networks
        )
        self._resolver = resolver
        self._dns_ttl = dns_ttl
        self._dns: dict[tuple[str, int], tuple[float, list[str]]] = {}
        self._adapter_args = (shared_ssl_context(ca_bundle), max_pools, pool_per_host)
        self._adapter = PinningAdapter(*self._adapter_args)
        self._pid = os.getpid()

    def post(self, url: str, headers: Mapping[str, str], body: bytes) -> Response:
        """POST ``body`` to ``url`` and return the answer, whatever its status.

        Redirects are returned, not followed.  ``headers`` should carry the signed
        ``Host``; it is added from the URL when missing.  Raises a
        :class:`TransportError` subclass when no complete response arrived in time.
        """
        started = time.monotonic()
        deadline = started + self.total_timeout
        try:
            target = _target(url)
        except (ValueError, requests.RequestException) as exc:
            raise ProtocolFailed(_short(f"invalid URL {url}: {exc}")) from exc
        ips = self._addresses(target.host, target.port)
        merged = CaseInsensitiveDict({"User-Agent": self.user_agent, "Host": target.host_header})
        merged.update(headers)
        merged["Content-Length"] = str(len(body))
        keeper = watchdog()
        entry = keeper.begin(deadline)
        try:
            for index, ip in enumerate(ips[:_MAX_ADDRESSES_TRIED]):
                try:
                    status, resp_headers, data = self._attempt(target, ip, merged, body, entry)
                except (ConnectFailed, TimedOut) as exc:
                    # Another address only while nothing was sent: a POST must not go twice.
                    unsent = isinstance(exc, ConnectFailed) or exc.during_connect
                    last = index == min(len(ips), _MAX_ADDRESSES_TRIED) - 1
                    if last or entry.expired or isinstance(exc, TLSFailed) or not unsent:
                        raise
                    continue
                return Response(status, resp_headers, data, time.monotonic() - started)
            raise AssertionError("unreachable: resolve_checked returns at least one address")
        finally:
            keeper.end(entry)

    def close(self) -> None:
        """Close the idle pooled connections (of all threads) and forget cached addresses.

        Requests in flight finish normally and their connections are then closed; the
        transport stays usable and opens new connections as needed.
        """
        self._dns.clear()
        self._adapter.close()

    def _addresses(self, host: str, port: int) -> list[str]:
        """The checked addresses for ``host``, from a short cache (the check is cached too)."""
        now = time.monotonic()
        key = (host, port)
        hit = self._dns.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        ips = resolve_checked(host, port, self.allowed_networks, resolver=self._resolver)
        if len(self._dns) >= _DNS_CACHE_SIZE:
            self._dns = {k: v for k, v in self._dns.items() if v[0] > now}
            if len(self._dns) >= _DNS_CACHE_SIZE:
                self._dns = {}
        self._dns[key] = (now + self._dns_ttl, ips)
        return ips

    def _adapter_for_process(self) -> PinningAdapter:
        """The shared adapter; a forked child gets fresh pools, never the parent's sockets."""
        if self._pid != os.getpid():
            self._adapter = PinningAdapter(*self._adapter_args)
            self._pid = os.getpid()
        return self._adapter

    def _attempt(
        self,
        target: _Target,
        ip: str,
        headers: CaseInsensitiveDict[str],
        body: bytes,
        entry: Entry,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Send once to ``ip`` and read the capped body; translate every failure."""
        remaining = entry.deadline - time.monotonic()
        if remaining <= 0:
            raise TimedOut(f"timed out: no response within {self.total_timeout:g} s")
        request = PinnedRequest()
        request.method = "POST"
        request.url = target.url
        request.headers = headers
        request.body = body
        request.pin = (target.scheme, ip, target.port, target.host)
        timeout = (min(self.connect_timeout, remaining), min(self.read_timeout, remaining))
        where = f"{target.host} ({ip})" if ip != target.host else ip
        try:
            response = self._adapter_for_process().send(request, stream=True, timeout=timeout)
            data = self._read_capped(response)
        except (requests.RequestException, Urllib3Error, OSError) as exc:
            raise self._translate(exc, entry, where) from exc
        if entry.expired and response.raw.length_remaining is None and not response.raw.chunked:
            # The watchdog's shutdown looks like the normal end of a close-delimited body.
            raise TimedOut(f"timed out: no complete response within {self.total_timeout:g} s")
        return response.status_code, response.headers, data

    def _read_capped(self, response: requests.Response) -> bytes:
        """Read at most ``max_response_bytes``; close the connection rather than drain more."""
        raw = response.raw
        cap = self.max_response_bytes
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = raw.read(min(_READ_CHUNK, cap + 1 - size), decode_content=False)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                raw.close()
                break
        raw.release_conn()
        data = b"".join(chunks)
        return data[:cap] if size > cap else data

    def _translate(self, exc: BaseException, entry: Entry, where: str) -> Exception:
        """Map a requests/urllib3/socket failure onto the transport's error classes."""
        if isinstance(exc, TransportError):
            return exc
        if entry.expired:
            return TimedOut(f"timed out: no complete response within {self.total_timeout:g} s")
        reason = _root_cause(exc)
        if isinstance(reason, NewConnectionError | ConnectionRefusedError):
            # Checked first: urllib3's NewConnectionError subclasses ConnectTimeoutError.
            return ConnectFailed(_short(f"connect to {where} failed: {_describe(reason)}"))
        if isinstance(exc, requests.ConnectTimeout) or isinstance(reason, ConnectTimeoutError):
            error = TimedOut(f"connect to {where} timed out after {self.connect_timeout:g} s")
            error.during_connect = True
            return error
        if isinstance(exc, requests.ReadTimeout | ReadTimeoutError | socket.timeout):
            return TimedOut(
                f"timed out waiting for {where}: {self.read_timeout:g} s without a byte"
            )
        if isinstance(exc, requests.exceptions.SSLError | Urllib3SSLError | ssl.SSLError):
            return TLSFailed(_short(f"TLS failed with {where}: {_describe(reason)}"))
        return ProtocolFailed(_short(f"{where}: {_describe(reason)}"))


def _root_cause(exc: BaseException) -> BaseException:
    """Unwrap requests' and urllib3's wrapper exceptions down to the informative one."""
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


def _short(message: str) -> str:
    """Trim a message to fit a ``last_error`` column comfortably."""
    return message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 3] + "..."

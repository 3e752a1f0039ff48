"""The HTTP client that POSTs signed bodies to remote inboxes.

One :class:`Transport` serves every thread of a worker process.  Three properties
matter more than convenience here:

* **It reads the URL as it was stored and signed.**  The host, port, request target
  and ``Host`` header are those of :func:`~django_outbox.transport.target.parse_target`,
  the one parser ``send()`` and signing use too, so the host that per-host caps,
  breakers and the admin count is the host contacted.
* **It connects to the address it checked.**  The host is resolved and vetted by
  :func:`~django_outbox.transport.addresses.resolve_checked`; the connection pool is then built
  for that IP, while the ``Host`` header, TLS SNI and certificate check keep the real
  host name.  Pools are keyed by (scheme, IP, port, host name), so two names served
  from one IP never share a TLS identity.
* **Nothing outlives the total time budget.**  A process-wide watchdog thread keeps
  the deadlines of the requests in flight and shuts down the socket of any request
  still running past its deadline, so a server trickling one byte per second cannot
  hold a worker slot (per-read socket timeouts alone would let it); connect and TLS
  handshake are bounded by socket timeouts cut to the remaining budget.  See
  :mod:`django_outbox.transport.pool`.
* **Bounded reads.**  At most ``max_response_bytes`` of a body are read; a longer
  body is cut off by closing the connection instead of draining it.

A shared, thread-safe ``requests`` adapter owns the urllib3 pools (they are locked).
A request takes a connection from its pool and drives it itself: connect (TCP and
TLS) if the pooled connection is closed, send, read the answer, and give the
connection back only after a complete, uncut exchange.  Not on the path, for CPU:
``Session`` (which also reads the *whole* body of a 3xx answer, uncapped, and looks
proxies and settings up in the environment on every call), the adapter's ``send``
and urllib3's ``urlopen`` (a retry object, a timeout object, URL parsing and a
``requests.Response`` per call).  Proxies are never used: a proxy would connect to
the host name, not to the checked address.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from urllib3.exceptions import ClosedPoolError
from urllib3.response import HTTPResponse

from django_outbox.exceptions import InvalidInbox
from django_outbox.transport.addresses import (
    IPNetwork,
    Resolver,
    parse_networks,
    resolve_checked,
)
from django_outbox.transport.errors import (
    LOW_LEVEL_ERRORS,
    ConnectFailed,
    ProtocolFailed,
    Step,
    TimedOut,
    TLSFailed,
    out_of_time,
    translate,
)
from django_outbox.transport.pool import PinningAdapter, shared_ssl_context, watchdog
from django_outbox.transport.target import Target, parse_target

_READ_CHUNK = 64 * 1024
_MAX_ADDRESSES_TRIED = 3
_DNS_CACHE_SIZE = 4096


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
        :class:`TransportError` subclass when no complete response arrived in time,
        :class:`ProtocolFailed` at once for a URL ``parse_target`` refuses.
        """
        started = time.monotonic()
        deadline = started + self.total_timeout
        try:
            target = parse_target(url)
        except InvalidInbox as exc:
            raise ProtocolFailed(f"invalid URL: {exc}") from None
        ips = self._addresses(target.host, target.port)[:_MAX_ADDRESSES_TRIED]
        # Lower-cased names, so that a caller's "host" replaces the default "Host".
        named = {
            "user-agent": ("User-Agent", self.user_agent),
            "host": ("Host", target.host_header),
        }
        for name, value in headers.items():
            named[name.lower()] = (name, value)
        named["content-length"] = ("Content-Length", str(len(body)))
        merged = dict(named.values())
        for index, ip in enumerate(ips):
            try:
                status, resp_headers, data = self._attempt(target, ip, merged, body, deadline)
            except (ConnectFailed, TimedOut) as exc:
                # Another address only while nothing was sent: a POST must not go twice.
                unsent = isinstance(exc, ConnectFailed) or exc.during_connect
                last = index == len(ips) - 1 or time.monotonic() >= deadline
                if last or isinstance(exc, TLSFailed) or not unsent:
                    raise
                continue
            return Response(status, resp_headers, data, time.monotonic() - started)
        raise AssertionError("unreachable: resolve_checked returns at least one address")

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
        self, target: Target, ip: str, headers: dict[str, str], body: bytes, deadline: float
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Send once to ``ip`` on a pooled connection; translate every failure.

        The connection goes back to its pool only after a complete, uncut exchange,
        and only once the watchdog has let go of it.
        """
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise out_of_time(self.total_timeout)
        where = f"{target.host} ({ip})" if ip != target.host else ip
        pin = (target.scheme, ip, target.port, target.host)
        pool = self._adapter_for_process().pool_for(*pin)
        keeper = watchdog()
        entry = keeper.begin(deadline)
        conn: Any = None
        response: HTTPResponse | None = None
        reuse = False
        step: Step = "connect"
        try:
            try:
                conn = pool._get_conn()
            except ClosedPoolError:  # close() ran meanwhile: take the pool's successor
                pool = self._adapter_for_process().pool_for(*pin)
                conn = pool._get_conn()
            keeper.use(entry, conn)
            conn.timeout = min(self.connect_timeout, remaining)
            if conn.is_closed:
                conn.connect()
            step = "send"
            _send(conn, target.path, headers, body)
            step = "receive"
            conn.timeout = min(self.read_timeout, max(0.001, deadline - time.monotonic()))
            response = conn.getresponse()
            data, complete = self._read_capped(response)
            if entry.expired and response.length_remaining is None and not response.chunked:
                # The watchdog's shutdown looks like the normal end of a close-delimited body.
                raise out_of_time(self.total_timeout)
            reuse = complete and not conn.is_closed
            return response.status, response.headers, data
        except LOW_LEVEL_ERRORS as exc:
            timeouts = (self.connect_timeout, self.read_timeout, self.total_timeout)
            raise translate(exc, step, where, expired=entry.expired, timeouts=timeouts) from exc
        finally:
            keeper.end(entry)
            if conn is not None:
                conn.outbox_entry = None
                if not reuse or entry.expired:
                    if response is not None:
                        response.close()  # a "Connection: close" answer holds the socket
                    conn.close()
                pool._put_conn(conn)

    def _read_capped(self, response: HTTPResponse) -> tuple[bytes, bool]:
        """Read at most ``max_response_bytes``; True when the whole body was read."""
        cap = self.max_response_bytes
        chunks: list[bytes] = []
        size = 0
        while not response.closed:
            chunk = response.read(min(_READ_CHUNK, cap + 1 - size), decode_content=False)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:  # the rest is not drained: the connection will be closed
                return b"".join(chunks)[:cap], False
        return b"".join(chunks), response.closed


def _send(conn: Any, path: str, headers: dict[str, str], body: bytes) -> None:
    """Write the request; a server that hangs up early may still have answered."""
    try:
        conn.request(
            "POST", path, body=body, headers=headers, preload_content=False, decode_content=False
        )
    except BrokenPipeError:
        pass  # as urllib3: read whatever answer the server sent before closing
    except OSError as exc:
        if exc.errno not in (errno.EPROTOTYPE, errno.ECONNRESET):
            raise

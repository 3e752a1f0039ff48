"""The HTTP client that POSTs signed bodies to remote inboxes, on an asyncio event loop.

Every request of a worker process runs as a coroutine on an event loop, so hundreds
wait for their answers at once without a thread each.  One :class:`Transport` may
serve several loops (a worker's main loop and its urgent one): each loop keeps its
own idle connections, and resolved addresses are shared.  Three properties matter
more than convenience here:

* **It reads the URL as it was stored and signed.**  The host, port, request target
  and ``Host`` header are those of :func:`~django_outbox.transport.target.parse_target`,
  the one parser ``send()`` and signing use too, so the host that per-host caps,
  breakers and the admin count is the host contacted.
* **It connects to the address it checked.**  The host is resolved and vetted by
  :func:`~django_outbox.transport.addresses.resolve_checked`; the connection goes to
  that IP, while the ``Host`` header, TLS SNI and certificate check keep the real host
  name.  Idle connections are kept per (scheme, IP, port, host name), so two names
  served from one IP never share a TLS identity.
* **Nothing outlives the total time budget.**  Each request runs under a deadline of
  ``total_timeout`` seconds (connect, TLS, send and the whole answer), connecting is
  bounded by ``connect_timeout``, and a server quiet for ``read_timeout`` seconds in
  the middle of its answer is cut off: a server trickling one byte a second holds a
  request for the budget at most.
* **Bounded reads.**  At most ``max_response_bytes`` of a body are read; a longer body
  ends the connection instead of being drained.

Redirects are returned, not followed, and proxies are never used (a proxy would
connect to the host name, not to the checked address).  Neither ``requests`` nor
urllib3 is on this path: parsing an answer in place on the loop (with ``httptools``,
:mod:`~django_outbox.transport.connection`) costs a fraction of their per-request
objects (see ``docs/benchmarks.md``).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from django_outbox.exceptions import InvalidInbox
from django_outbox.transport.addresses import (
    IPNetwork,
    Resolver,
    parse_networks,
    resolve_checked,
)
from django_outbox.transport.connection import HTTPConnection
from django_outbox.transport.failures import (
    ConnectFailed,
    ProtocolFailed,
    TimedOut,
    TLSFailed,
    TransportError,
    describe,
    out_of_time,
    short,
)
from django_outbox.transport.pool import ConnectionPools, Pin, shared_ssl_context
from django_outbox.transport.target import Target, parse_target

_MAX_ADDRESSES_TRIED = 3
#: What may not appear in a header's name, and in its value: what would split or smuggle one.
_NOT_IN_NAME = re.compile(r"[:\r\n\0 \t]")
_NOT_IN_VALUE = re.compile(r"[\r\n\0]")
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
    """An HTTP client for inbox deliveries on one event loop; see the module docstring.

    ``pool_per_host`` is how many idle keep-alive connections each (IP, port, host)
    keeps; ``max_pools`` bounds how many such addresses keep any (least recently used
    go first).  ``allowed_networks`` takes networks or CIDR strings.  ``ca_bundle``
    replaces the system trust store, ``resolver`` replaces DNS (tests); the SSRF check
    applies to its answers all the same.  ``dns_ttl`` is how long checked addresses
    are reused.  Create it anywhere; use it from any event loop (connections are kept
    per loop).
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
        self._tls = shared_ssl_context(ca_bundle)
        self._pool_sizes = (pool_per_host, max_pools)
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ConnectionPools]
        self._pools = weakref.WeakKeyDictionary()
        self._agent = _header_line("User-Agent", user_agent)

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> Response:
        """POST ``body`` to ``url`` and return the answer, whatever its status.

        ``headers`` should carry the signed ``Host``; it is added from the URL when
        missing.  Raises a :class:`TransportError` subclass when no complete answer
        arrived in time, :class:`ProtocolFailed` at once for a URL ``parse_target``
        refuses.
        """
        started = time.monotonic()
        try:
            target = parse_target(url)
        except InvalidInbox as error:
            raise ProtocolFailed(short(f"invalid URL: {error}")) from None
        request = self._encode(target, headers, body)
        try:
            async with asyncio.timeout(self.total_timeout):
                ips = (await self._addresses(target.host, target.port))[:_MAX_ADDRESSES_TRIED]
                for index, ip in enumerate(ips):
                    try:
                        status, answer_headers, data = await self._attempt(target, ip, request)
                    except (ConnectFailed, TimedOut) as error:
                        # Another address only while nothing was sent: a POST must not go twice.
                        unsent = isinstance(error, ConnectFailed) or error.during_connect
                        last = index == len(ips) - 1
                        if last or isinstance(error, TLSFailed) or not unsent:
                            raise
                        continue
                    return Response(status, answer_headers, data, time.monotonic() - started)
        except TimeoutError:
            raise out_of_time(self.total_timeout) from None
        raise AssertionError("unreachable: resolve_checked returns at least one address")

    def close(self) -> None:
        """Close the idle connections and forget cached addresses; the transport stays usable."""
        self._dns.clear()
        for pools in list(self._pools.values()):
            pools.close()

    def _encode(self, target: Target, headers: Mapping[str, str], body: bytes) -> bytes:
        """The request head and body, as they go on the wire."""
        lines = [f"POST {target.path} HTTP/1.1\r\n"]
        given = {name.lower() for name in headers}
        if "host" not in given:
            lines.append(f"Host: {target.host_header}\r\n")
        if "user-agent" not in given:
            lines.append(self._agent)
        lines += [_header_line(name, value) for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}\r\n\r\n")
        try:
            return "".join(lines).encode("ascii") + body
        except UnicodeEncodeError:
            raise ProtocolFailed("a request header is not ASCII") from None

    async def _addresses(self, host: str, port: int) -> list[str]:
        """The checked addresses for ``host``, from a short cache (the check is cached too)."""
        now = time.monotonic()
        key = (host, port)
        hit = self._dns.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        loop = asyncio.get_running_loop()
        ips = await loop.run_in_executor(
            None,
            lambda: resolve_checked(host, port, self.allowed_networks, resolver=self._resolver),
        )
        if len(self._dns) >= _DNS_CACHE_SIZE:
            self._dns = {k: v for k, v in self._dns.items() if v[0] > now}
            if len(self._dns) >= _DNS_CACHE_SIZE:
                self._dns = {}
        self._dns[key] = (now + self._dns_ttl, ips)
        return ips

    async def _attempt(
        self, target: Target, ip: str, request: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Send once to ``ip`` on an idle or new connection; give it back if still fit."""
        pin: Pin = (target.scheme, ip, target.port, target.host)
        where = f"{target.host} ({ip})" if ip != target.host else ip
        loop = asyncio.get_running_loop()
        pools = self._pools.get(loop)
        if pools is None:
            pools = self._pools[loop] = ConnectionPools(*self._pool_sizes)
        connection = pools.take(pin) or await self._connect(target, ip, where)
        try:
            answer = await connection.exchange(request)
        except TransportError as error:
            connection.close()
            raise type(error)(short(f"{where}: {error}")) from None
        except BaseException:
            connection.close()  # cancelled (the budget ran out): the socket must not linger
            raise
        if answer.complete:
            pools.give_back(pin, connection)
        else:
            connection.close()
        return answer.status, answer.headers, answer.body

    async def _connect(self, target: Target, ip: str, where: str) -> HTTPConnection:
        """A new connection to ``ip`` (TLS verified against the host name), in time."""
        loop = asyncio.get_running_loop()
        tls = target.scheme == "https"
        connection = HTTPConnection(self.max_response_bytes, self.read_timeout)
        try:
            async with asyncio.timeout(self.connect_timeout):
                await loop.create_connection(
                    lambda: connection,
                    ip,
                    target.port,
                    ssl=self._tls if tls else None,
                    server_hostname=target.host if tls else None,
                    ssl_handshake_timeout=self.connect_timeout if tls else None,
                )
        except TimeoutError:
            connection.close()
            error = TimedOut(f"connect to {where} timed out after {self.connect_timeout:g} s")
            error.during_connect = True
            raise error from None
        except (ssl.SSLError, ssl.CertificateError) as failure:
            raise TLSFailed(short(f"TLS failed with {where}: {describe(failure)}")) from None
        except OSError as failure:
            raise ConnectFailed(short(f"connect to {where} failed: {describe(failure)}")) from None
        return connection


def _header_line(name: str, value: str) -> str:
    """``name: value`` and its line end, refusing what would split or smuggle a header."""
    if _NOT_IN_NAME.search(name) or _NOT_IN_VALUE.search(value):
        raise ProtocolFailed(f"header {name[:40]!r} cannot be sent as one line")
    return f"{name}: {value}\r\n"

"""Connection machinery behind :mod:`django_outbox.transport`: deadlines and pinned pools.

Private to the transport.  Two things live here:

* the **watchdog**, one daemon thread per process holding a heap of request deadlines.
  When a request outlives its deadline the watchdog shuts down its socket: a blocked
  recv/send wakes with EOF or EPIPE.  It acts on a duplicate descriptor the request
  owns (taken when the connection is handed out or connects, closed when the request
  ends or the connection returns to its pool, always under the watchdog's lock), so
  it never hits a descriptor number reused elsewhere, nor a socket another request
  took from the pool, and it still reaches a socket http.client has handed over to
  the response (``Connection: close`` answers).  Finished entries stay in the heap
  until they surface or a compaction drops them: about twice the requests in flight.
* the **pinned adapter**: a ``requests`` adapter whose urllib3 pools connect to the IP
  the transport checked, with TLS SNI and certificate verification against the real
  host name.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import queue
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from requests.adapters import HTTPAdapter
from requests.models import PreparedRequest, Response
from requests.structures import CaseInsensitiveDict
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError


class Entry:
    """One request's deadline, its connection and a duplicate of that connection's socket."""

    __slots__ = ("conn", "deadline", "done", "expired", "sock")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.conn: Any = None
        self.sock: socket.socket | None = None
        self.done = False
        self.expired = False

    def arm(self, conn: Any) -> None:
        """Hold a duplicate descriptor of ``conn``'s socket (watchdog lock held)."""
        self.disarm()
        sock = conn.sock
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                self.sock = socket.fromfd(sock.fileno(), sock.family, sock.type)
        if self.expired:
            self.cut()

    def disarm(self) -> None:
        """Let go of the duplicate descriptor (watchdog lock held)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def cut(self) -> None:
        """Shut the socket down: blocked reads see EOF, sends fail (watchdog lock held)."""
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)


class Watchdog:
    """Shuts down the socket of any request still running past its deadline."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.local = threading.local()
        self._wake = threading.Condition(self.lock)
        self._heap: list[tuple[float, int, Entry]] = []
        self._live = 0
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def begin(self, deadline: float) -> Entry:
        """Start timing the calling thread's request."""
        entry = Entry(deadline)
        with self.lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="outbox-deadlines")
                self._thread.daemon = True
                self._thread.start()
            self._live += 1
            heapq.heappush(self._heap, (deadline, next(self._seq), entry))
            if self._heap[0][2] is entry:
                self._wake.notify()
            if len(self._heap) > 2 * self._live + 64:
                self._heap = [item for item in self._heap if not item[2].done]
                heapq.heapify(self._heap)
        self.local.entry = entry
        return entry

    def end(self, entry: Entry) -> None:
        """Stop timing: the watchdog will never act for ``entry`` again."""
        self.local.entry = None
        with self.lock:
            entry.done = True
            entry.conn = None
            entry.disarm()
            self._live -= 1

    def current(self) -> Entry | None:
        """The calling thread's request, if it is between :meth:`begin` and :meth:`end`."""
        return getattr(self.local, "entry", None)

    def attach(self, conn: Any) -> None:
        """The calling thread's request now uses ``conn`` (fresh from its pool)."""
        entry = self.current()
        if entry is not None:
            with self.lock:
                entry.conn = conn
                conn.outbox_entry = entry
                if conn.sock is not None:
                    entry.arm(conn)

    def connected(self, conn: Any) -> None:
        """``conn`` has just connected: watch its new socket."""
        with self.lock:
            entry = getattr(conn, "outbox_entry", None)
            if entry is not None and entry.conn is conn and not entry.done:
                entry.arm(conn)

    def detach(self, conn: Any) -> None:
        """``conn`` goes back to its pool, where another request may take it."""
        with self.lock:
            entry = getattr(conn, "outbox_entry", None)
            conn.outbox_entry = None
            if entry is not None and entry.conn is conn:
                entry.conn = None
                entry.disarm()

    def _run(self) -> None:
        with self.lock:
            while True:
                now = time.monotonic()
                heap = self._heap
                while heap and (heap[0][2].done or heap[0][0] <= now):
                    entry = heapq.heappop(heap)[2]
                    if not entry.done:
                        entry.expired = True
                        entry.cut()
                self._wake.wait(heap[0][0] - now if heap else None)


_watchdog = Watchdog()


def watchdog() -> Watchdog:
    """The process's watchdog (a forked child gets its own; threads do not survive fork)."""
    return _watchdog


def _reset_after_fork() -> None:
    global _watchdog
    _watchdog = Watchdog()


os.register_at_fork(after_in_child=_reset_after_fork)

if TYPE_CHECKING:
    _ConnBase = HTTPConnection
    _PoolBase = HTTPConnectionPool
else:
    _ConnBase = _PoolBase = object


class _DeadlineConnection(_ConnBase):
    """Connection hooks: bound connect + TLS handshake by the budget, then get watched."""

    def _new_conn(self) -> socket.socket:
        entry = _watchdog.current()
        if entry is not None:
            remaining = entry.deadline - time.monotonic()
            if remaining <= 0 or entry.expired:
                raise ConnectTimeoutError(self, "time budget spent before connecting")
            if self.timeout is None or self.timeout > remaining:
                self.timeout = remaining
        sock = super()._new_conn()
        if entry is not None:
            # CPython bounds a whole TLS handshake by the socket timeout.
            budget = entry.deadline - time.monotonic()
            sock.settimeout(max(0.001, min(self.timeout or budget, budget)))
        return sock

    def connect(self) -> None:
        super().connect()
        _watchdog.connected(self)


class _HTTPConnection(_DeadlineConnection, HTTPConnection):
    pass


class _HTTPSConnection(_DeadlineConnection, HTTPSConnection):
    pass


class _DeadlinePool(_PoolBase):
    """Pool hooks: tell the watchdog which connection a request holds."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        _watchdog.attach(conn)
        return conn

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            _watchdog.detach(conn)
        if self.pool is not None:
            try:
                self.pool.put(conn, block=False)
                return
            except queue.Full:
                pass  # more requests in flight than pool_per_host: drop this one, quietly
        if conn is not None:
            conn.close()


class _HTTPPool(_DeadlinePool, HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(_DeadlinePool, HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class _SharedContext(ssl.SSLContext):
    """An SSL context every connection shares, with ALPN set once.

    urllib3 calls ``set_alpn_protocols`` on the context for each new connection; on a
    shared context that frees OpenSSL's ALPN buffer while other threads may copy it.
    """

    def set_alpn_protocols(self, alpn_protocols: Iterable[str]) -> None:
        """Ignore urllib3's per-connection call; :func:`shared_ssl_context` set it."""


def shared_ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """A verifying TLS client context (TLS >= 1.2), loaded once, safe to share by threads."""
    context = _SharedContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_bundle:
        context.load_verify_locations(cafile=ca_bundle)
    else:
        context.load_default_certs()
    ssl.SSLContext.set_alpn_protocols(context, ["http/1.1"])
    return context


class PinnedRequest(PreparedRequest):
    """A prepared request that carries the vetted address it must be sent to."""

    pin: tuple[str, str, int, str]  # scheme, IP, port, host name


class PinningAdapter(HTTPAdapter):
    """An adapter whose pools connect to the pinned IP while verifying the host name.

    Pools are keyed by (scheme, IP, port, host name): ``server_hostname`` is part of
    urllib3's pool key, so two names on one IP never share a connection or a TLS
    identity.  Thread-safe: urllib3's pool manager and pools are locked.
    """

    def __init__(self, ssl_context: ssl.SSLContext, max_pools: int, pool_per_host: int) -> None:
        self._ssl_context = ssl_context
        super().__init__(pool_connections=max_pools, pool_maxsize=pool_per_host, max_retries=0)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def get_connection_with_tls_context(
        self,
        request: PreparedRequest,
        verify: bool | str | None,
        proxies: Mapping[str, str] | None = None,
        cert: Any = None,
    ) -> Any:
        """Return the pool for the request's pinned (IP, port, host name); never DNS."""
        pin = getattr(request, "pin", None)
        if pin is None:
            raise RuntimeError("refusing to send without a checked address")
        scheme, ip, port, server_name = pin
        # server_hostname also keys plain-HTTP pools (urllib3 drops it from their kwargs).
        pool_kwargs: dict[str, Any] = {"server_hostname": server_name}
        if scheme == "https":
            pool_kwargs["ssl_context"] = self._ssl_context
        return self.poolmanager.connection_from_host(ip, port, scheme, pool_kwargs=pool_kwargs)

    def build_response(self, req: PreparedRequest, resp: Any) -> Response:
        """Wrap urllib3's response without the cookie and charset work nobody here reads."""
        response = Response()
        response.status_code = resp.status
        response.headers = CaseInsensitiveDict(resp.headers)
        response.raw = resp
        response.reason = resp.reason
        response.url = req.url or ""
        response.request = req
        response.connection = self
        return response

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        """Do nothing: trust roots live in the shared SSL context, not on each pool.

        The base class would set ``ca_certs`` on the pool, making urllib3 reload the CA
        bundle into the shared context on every new connection.
        """

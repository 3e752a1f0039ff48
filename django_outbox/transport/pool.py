"""Connection machinery behind the transport client: deadlines and pinned pools.

Two things live here:

* the **watchdog**, one daemon thread per process that shuts down the socket of any
  request still running past its deadline: a blocked recv/send wakes with EOF or EPIPE.
  It acts on a duplicate descriptor of the connection's socket, taken once when the
  connection connects.  A request is linked to that duplicate (under the watchdog's
  lock) only while it holds the connection, never once the connection is back in its
  pool, and the duplicate is closed only when no request in flight is linked to it:
  when the connection closes or, if a request still reads from the socket then
  (http.client hands a ``Connection: close`` answer's socket over to the response),
  when that request ends.  So the watchdog never hits a descriptor number reused
  elsewhere, nor a connection another request took from the pool.  Per request the
  bookkeeping is three O(1) steps under the lock (begin, use, end), no system call;
  the thread sleeps until the earliest deadline of the requests in flight and is
  woken only by a request with an earlier one.
* the **pinned pools**: urllib3 pools, owned by a ``requests`` adapter, that connect
  to the IP the transport checked, with TLS SNI and certificate verification against
  the real host name.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError
from urllib3.poolmanager import PoolKey

#: Pinned addresses whose pool is remembered; past this many the memo starts afresh.
_MEMO_SIZE = 8192
#: How long a pool found is used without asking the pool manager again.
_POOL_MEMO_SECONDS = 1.0


class Entry:
    """One request attempt's deadline and the duplicate socket the watchdog would cut."""

    __slots__ = ("deadline", "done", "expired", "owned", "sock")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.sock: socket.socket | None = None
        self.owned = False  # ``sock`` was handed over by its closed connection
        self.done = False
        self.expired = False

    def cut(self) -> None:
        """Shut the socket down: blocked reads see EOF, sends fail (watchdog lock held)."""
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)


class Watchdog:
    """Shuts down the socket of any request still running past its deadline."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._live: dict[Entry, None] = {}
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def begin(self, deadline: float) -> Entry:
        """Start timing a request attempt."""
        entry = Entry(deadline)
        with self.lock:
            self._live[entry] = None
            if deadline < self._wake_at:
                self._wake_at = deadline
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="outbox-deadlines")
                    self._thread.daemon = True
                    self._thread.start()
                else:
                    self._wake.notify()
        return entry

    def use(self, entry: Entry, conn: Any) -> None:
        """The attempt of ``entry`` holds ``conn`` now (just taken from its pool)."""
        with self.lock:
            conn.outbox_entry = entry
            entry.sock = conn.outbox_dup
            if entry.expired:
                entry.cut()

    def end(self, entry: Entry) -> None:
        """Stop timing: the watchdog will never act for ``entry`` again."""
        with self.lock:
            self._live.pop(entry, None)
            entry.done = True
            sock, entry.sock = entry.sock, None
            owned, entry.owned = entry.owned, False
        if owned and sock is not None:
            sock.close()

    def connected(self, conn: Any) -> None:
        """``conn`` has just connected: keep a duplicate of its socket, watch it."""
        self.closing(conn)
        sock = conn.sock
        if not isinstance(sock, socket.socket):
            return
        try:
            dup = socket.fromfd(sock.fileno(), sock.family, sock.type)
        except OSError:
            return
        with self.lock:
            conn.outbox_dup = dup
            entry = conn.outbox_entry
            if entry is not None and not entry.done:
                entry.sock = dup
                if entry.expired:
                    entry.cut()

    def closing(self, conn: Any) -> None:
        """``conn`` closes: its duplicate goes, unless a request still reads that socket."""
        with self.lock:
            dup, conn.outbox_dup = conn.outbox_dup, None
            entry = conn.outbox_entry
            if dup is not None and entry is not None and not entry.done and entry.sock is dup:
                entry.owned = True  # closed by end(); nothing else refers to it
                dup = None
        if dup is not None:
            dup.close()  # no request in flight refers to it: safe outside the lock

    def _run(self) -> None:
        with self.lock:
            while True:
                now = time.monotonic()
                wake_at = math.inf
                for entry in self._live:
                    if entry.deadline <= now:
                        if not entry.expired:
                            entry.expired = True
                            entry.cut()
                    elif entry.deadline < wake_at:
                        wake_at = entry.deadline
                self._wake_at = wake_at
                self._wake.wait(wake_at - now if wake_at < math.inf else None)


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

    #: The attempt holding this connection, set by :meth:`Watchdog.use`.
    outbox_entry: Entry | None = None
    #: The duplicate of the socket, for the watchdog (see the module docstring).
    outbox_dup: socket.socket | None = None

    def _new_conn(self) -> socket.socket:
        entry = self.outbox_entry
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

    def close(self) -> None:
        super().close()
        _watchdog.closing(self)


class _HTTPConnection(_DeadlineConnection, HTTPConnection):
    pass


class _HTTPSConnection(_DeadlineConnection, HTTPSConnection):
    pass


class _QuietPool(_PoolBase):
    """Pool hook: a connection that finds the pool full is closed without a warning."""

    def _put_conn(self, conn: Any) -> None:
        if self.pool is not None:
            try:
                self.pool.put(conn, block=False)
                return
            except queue.Full:
                pass  # more requests in flight than pool_per_host: drop this one, quietly
        if conn is not None:
            conn.close()


class _HTTPPool(_QuietPool, HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(_QuietPool, HTTPSConnectionPool):
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


class _Memo:
    """A pinned address's pool key and context, and its pool (weakly) until ``until``."""

    __slots__ = ("context", "key", "pool", "until")

    def __init__(self, key: PoolKey, context: dict[str, Any]) -> None:
        self.key, self.context = key, context
        self.pool: weakref.ref[HTTPConnectionPool] | None = None
        self.until = 0.0


class PinningAdapter(HTTPAdapter):
    """An adapter whose pools connect to the pinned IP while verifying the host name.

    Pools are keyed by (scheme, IP, port, host name): ``server_hostname`` is part of
    urllib3's pool key, so two names on one IP never share a connection or a TLS
    identity.  Thread-safe: urllib3's pool manager and pools are locked.  The transport
    takes connections from :meth:`pool_for` itself and never calls :meth:`send`.
    """

    def __init__(self, ssl_context: ssl.SSLContext, max_pools: int, pool_per_host: int) -> None:
        self._ssl_context = ssl_context
        self._memo: dict[tuple[str, str, int, str], _Memo] = {}
        super().__init__(pool_connections=max_pools, pool_maxsize=pool_per_host, max_retries=0)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def pool_for(self, scheme: str, ip: str, port: int, server_name: str) -> HTTPConnectionPool:
        """The pool for (scheme, IP, port, host name), made on first use; never DNS.

        A pool found is remembered for a second, weakly: the pool manager's lock, taken
        on each lookup, was where 32 threads queued.  The manager's least-recently-used
        order is refreshed once a second per pool, and a pool it dropped (urllib3 2
        closes nothing it evicts: the last reference going closes the connections) is
        not kept alive here.
        """
        pin = (scheme, ip, port, server_name)
        now = time.monotonic()
        memo = self._memo.get(pin)
        if memo is None:
            manager = self.poolmanager
            # server_hostname also keys plain-HTTP pools (urllib3 drops it from their kwargs).
            context = {**manager.connection_pool_kw, "server_hostname": server_name}
            if scheme == "https":
                context["ssl_context"] = self._ssl_context
            context.update(scheme=scheme, host=ip, port=port)
            memo = _Memo(manager.key_fn_by_scheme[scheme](context), context)
            if len(self._memo) >= _MEMO_SIZE:
                self._memo = {}
            self._memo[pin] = memo
        pool = memo.pool() if memo.pool is not None else None
        if pool is None or memo.until < now or pool.pool is None:  # pool.pool: not closed
            # urllib3 consumes the context when it makes a pool: hand it a copy.
            pool = self.poolmanager.connection_from_pool_key(memo.key, dict(memo.context))
            memo.pool, memo.until = weakref.ref(pool), now + _POOL_MEMO_SECONDS
        return pool

    def close(self) -> None:
        """Close the pools: idle connections now, those in use when they come back."""
        memos, self._memo = self._memo, {}
        for memo in memos.values():
            pool = memo.pool() if memo.pool is not None else None
            if pool is not None:
                pool.close()
        super().close()

"""Loopback inbox servers for tests, the demo and benchmarks (standard library only).

:class:`InboxServer`: an HTTP/1.1 keep-alive server on a 127/8 address that records
every request and answers per path as a :class:`Behaviour` says.  It runs on asyncio,
so a delayed or silent answer costs a sleeping coroutine, not a thread.
:class:`ServerFarm` puts many servers on one loop thread, each on its own address
(127.0.0.2, 127.0.0.3...): distinct IPs are distinct *hosts* to the transport, which
pins connections by IP, with no DNS (one server keyed by ``Host`` would need made-up
names resolving to loopback).  Benchmarks run a farm out of process (no shared GIL)::

    python -m testproject.inbox_servers --count 1000 --delay 0.1 --silent-fraction 0.1

prints one JSON line ``{"urls": [...], "silent": [...], "pid": N}``, serves until
SIGTERM or SIGINT, then prints ``{"requests": N, "connections": M}`` to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import ipaddress
import itertools
import json
import os
import signal
import ssl
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

_MAX_HEAD = 64 * 1024
_MAX_BODY = 16 * 1024 * 1024
_HANGUPS = (ConnectionError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received.  ``headers`` look up case-insensitively (``None`` when
    absent), ``connection`` numbers the TCP connection, ``status`` is the chosen answer."""

    method: str
    path: str
    headers: http.client.HTTPMessage
    body: bytes
    received_at: float
    connection: int
    status: int


@dataclass(frozen=True)
class Behaviour:
    """How a path answers: ``statuses`` in turn, the last repeating (``(500, 202)``);
    extra ``headers`` (``{"Retry-After": "120"}``); ``delay`` seconds first; ``silent``:
    never answer until stopped; ``trickle``: one byte every that many seconds;
    ``scheme``: 401 unless signed that way (see :meth:`accept_only`); ``gate``: its
    ``choose(behaviour, status, headers)`` may answer instead (an L402 paywall)."""

    statuses: Sequence[int] = (202,)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0
    silent: bool = False
    trickle: float | None = None
    scheme: str | None = None
    gate: Any = None

    @classmethod
    def accept_only(cls, scheme: str, **options: Any) -> Behaviour:
        """Answer 401 unless signed with ``scheme``: ``"rfc9421"`` needs a
        ``Signature-Input`` header; ``"cavage"`` needs ``Signature`` without it."""
        if scheme not in ("rfc9421", "cavage"):
            raise ValueError(f"unknown signature scheme {scheme!r}")
        return cls(scheme=scheme, **options)

    def accepts(self, headers: http.client.HTTPMessage) -> bool:
        """Whether the request's signature headers match :attr:`scheme`."""
        if self.scheme == "rfc9421":
            return "Signature-Input" in headers
        if self.scheme == "cavage":
            return "Signature" in headers and "Signature-Input" not in headers
        return True


def _quiet_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Clients that hang up or reject our certificate are part of the tests.
    if not isinstance(context.get("exception"), ssl.SSLError | ConnectionError):
        loop.default_exception_handler(context)


class _Loop:
    """An asyncio event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_quiet_handler)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class _Service:
    """``with`` support for anything with ``start()`` and ``stop()``."""

    def __enter__(self) -> Any:
        return self.start()  # type: ignore[attr-defined]

    def __exit__(self, *exc_info: object) -> None:
        self.stop()  # type: ignore[attr-defined]


class InboxServer(_Service):
    """A recording HTTP/1.1 server on ``host:port`` (port 0 picks a free one).

    Safe to use from test threads while it serves.  ``ssl_context`` serves HTTPS;
    ``record=False`` only counts (benchmarks).  ``request_count`` and ``connections``
    count requests and accepted TCP connections.  Bodies need ``Content-Length``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        behaviour: Behaviour | None = None,
        ssl_context: ssl.SSLContext | None = None,
        record: bool = True,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"inbox servers bind loopback addresses only, not {host}")
        self.host, self.port, self.ssl_context, self.record = host, port, ssl_context, record
        self.default = behaviour or Behaviour()
        self._lock = threading.Lock()
        self._behaviours: dict[str, Behaviour] = {}
        self._counters: dict[str, int] = {}
        self._records: list[RecordedRequest] = []
        self.request_count = self.connections = 0
        self._loop: _Loop | None = None
        self._own_loop = True
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping: asyncio.Event | None = None

    def start(self, loop: _Loop | None = None) -> InboxServer:
        """Bind and serve (on ``loop`` if given, else on a loop of its own); returns self."""
        self._own_loop = loop is None
        self._loop = loop or _Loop()
        self._loop.run(self._start())
        return self

    async def _start(self) -> None:
        self._stopping = asyncio.Event()
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, ssl=self.ssl_context, backlog=1024, limit=_MAX_HEAD
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        """Stop listening, end every connection (silent ones too) and the loop if owned."""
        if self._loop is None:
            return
        with contextlib.suppress(TimeoutError, RuntimeError):
            self._loop.run(self._stop(), timeout=10)
        if self._own_loop:
            self._loop.close()
        self._loop = None

    async def _stop(self) -> None:
        assert self._server is not None and self._stopping is not None
        self._server.close()
        self._stopping.set()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)

    def url(self, path: str = "/inbox", *, host: str | None = None) -> str:
        """The URL of ``path``; ``host`` replaces the IP (e.g. a name a test resolves)."""
        scheme, name = "https" if self.ssl_context else "http", host or self.host
        return f"{scheme}://{f'[{name}]' if ':' in name else name}:{self.port}{path}"

    def behave(self, path: str, behaviour: Behaviour) -> None:
        """Set how ``path`` answers from now on, restarting its status sequence."""
        with self._lock:
            self._behaviours[path] = behaviour
            self._counters[path] = 0

    def requests(self, path: str | None = None) -> list[RecordedRequest]:
        """Requests received so far, oldest first, optionally only those for ``path``."""
        with self._lock:
            records = list(self._records)
        return [r for r in records if path is None or r.path.split("?", 1)[0] == path]

    def clear(self) -> None:
        """Forget recorded requests (behaviours and their counters stay)."""
        with self._lock:
            self._records.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        connection = self.connections
        try:
            while (request := await _read_request(reader)) is not None:
                method, target, version, headers, body = request
                tokens = {t.strip().lower() for t in headers.get("Connection", "").split(",")}
                keep = "keep-alive" in tokens if version == "HTTP/1.0" else "close" not in tokens
                behaviour, status = self._choose(target.split("?", 1)[0], headers)
                now = time.time()
                with self._lock:
                    self.request_count += 1
                    if self.record:
                        args = (method, target, headers, body, now, connection, status)
                        self._records.append(RecordedRequest(*args))
                if not await self._answer(writer, behaviour, status, keep) or not keep:
                    break
        except (*_HANGUPS, asyncio.CancelledError):
            pass  # a client hanging up or sending garbage ends only its own connection
        finally:
            self._tasks.discard(task)
            writer.close()

    def _choose(self, path: str, headers: http.client.HTTPMessage) -> tuple[Behaviour, int]:
        with self._lock:
            behaviour = self._behaviours.get(path, self.default)
            index = self._counters.get(path, 0)
            self._counters[path] = index + 1
        status = behaviour.statuses[min(index, len(behaviour.statuses) - 1)]
        gated = (behaviour, status if behaviour.accepts(headers) else 401)
        return gated if behaviour.gate is None else behaviour.gate.choose(*gated, headers)

    async def _answer(
        self, writer: asyncio.StreamWriter, behaviour: Behaviour, status: int, keep: bool
    ) -> bool:
        """Write the answer; False when the connection must end (silent, stopped)."""
        assert self._stopping is not None
        if behaviour.silent:
            await self._stopping.wait()
            return False
        if behaviour.delay > 0:
            await asyncio.sleep(behaviour.delay)
        data = _response_bytes(status, behaviour, keep)
        step = len(data) if behaviour.trickle is None else 1
        for i in range(0, len(data), step):
            writer.write(data[i : i + step])
            await writer.drain()
            if behaviour.trickle is not None:
                await asyncio.sleep(behaviour.trickle)
        return True


async def _read_request(
    reader: asyncio.StreamReader,
) -> tuple[str, str, str, http.client.HTTPMessage, bytes] | None:
    """Read one request; None at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    line, *fields = head[:-4].decode("latin-1").split("\r\n")
    method, target, version = line.split(" ", 2)
    headers = http.client.HTTPMessage()  # case-insensitive; filled directly (email parser: slow)
    for name, _, value in (f.partition(":") for f in fields):
        headers[name.strip()] = value.strip()
    length = min(int(headers.get("Content-Length", "0") or 0), _MAX_BODY)
    body = await reader.readexactly(length) if length else b""
    return method, target, version, headers, body


def _response_bytes(status: int, behaviour: Behaviour, keep: bool) -> bytes:
    reason = http.client.responses.get(status, "Unknown")
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(behaviour.body)}"]
    lines += [f"{name}: {value}" for name, value in behaviour.headers.items()]
    if not keep:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + behaviour.body


def _raise_fd_limit() -> None:
    """Allow thousands of sockets (listeners plus connections) where the hard limit lets us."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
        if wanted > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def farm_addresses(count: int, first: str = "127.0.0.2") -> list[str]:
    """``count`` distinct addresses from ``first`` on, skipping x.x.x.0 and x.x.x.255."""
    start = ipaddress.IPv4Address(first)
    ips = (start + i for i in itertools.count())
    return [str(ip) for ip in itertools.islice((ip for ip in ips if ip.packed[-1] % 255), count)]


class ServerFarm(_Service):
    """Many :class:`InboxServer` hosts on one event-loop thread.

    A share ``silent_fraction`` of the hosts, spread evenly, never answer; the others
    answer as ``behaviour`` says.  ``port_base`` 0 lets each host pick a free port,
    otherwise host *i* listens on ``port_base + i``.  ``record`` as for InboxServer.
    """

    def __init__(
        self,
        count: int,
        *,
        behaviour: Behaviour | None = None,
        silent_fraction: float = 0.0,
        first_address: str = "127.0.0.2",
        port_base: int = 0,
        record: bool = True,
    ) -> None:
        self._loop: _Loop | None = None
        self.servers: list[InboxServer] = []
        self.silent: list[InboxServer] = []
        for i, ip in enumerate(farm_addresses(count, first_address)):
            is_silent = int((i + 1) * silent_fraction) > int(i * silent_fraction)
            chosen = Behaviour(silent=True) if is_silent else behaviour
            port = port_base + i if port_base else 0
            self.servers.append(InboxServer(ip, port, behaviour=chosen, record=record))
            if is_silent:
                self.silent.append(self.servers[-1])

    def start(self) -> ServerFarm:
        """Bind every host; returns self."""
        _raise_fd_limit()
        self._loop = _Loop()
        try:
            for server in self.servers:
                server.start(self._loop)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every host and the loop."""
        for server in self.servers:
            server.stop()
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def urls(self, path: str = "/inbox") -> list[str]:
        """Inbox URLs of all hosts, silent ones included."""
        return [server.url(path) for server in self.servers]

    def request_count(self) -> int:
        """Requests received by all hosts so far."""
        return sum(server.request_count for server in self.servers)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a farm until SIGTERM/SIGINT; print its URLs as JSON on stdout first."""
    parser = argparse.ArgumentParser(description="Serve loopback inboxes until killed.")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--silent-fraction", type=float, default=0.0)
    parser.add_argument("--port-base", type=int, default=0)
    parser.add_argument("--first-address", default="127.0.0.2")
    parser.add_argument("--status", type=int, default=202)
    parser.add_argument("--path", default="/inbox")
    options = vars(parser.parse_args(argv))
    path = options.pop("path")
    behaviour = Behaviour(statuses=(options.pop("status"),), delay=options.pop("delay"))
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    with ServerFarm(**options, behaviour=behaviour, record=False) as farm:
        urls, silent = farm.urls(path), [server.url(path) for server in farm.silent]
        print(json.dumps({"urls": urls, "silent": silent, "pid": os.getpid()}), flush=True)
        done.wait()
        count, opened = farm.request_count(), sum(s.connections for s in farm.servers)
    print(json.dumps({"requests": count, "connections": opened}), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

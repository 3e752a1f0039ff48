"""The transport's connection machinery: descriptors, pools, TLS deadlines."""

from __future__ import annotations

import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from django_outbox.transport import TimedOut
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.loop_transport import LoopTransport
from tests.support.raw_server import RawServer

JSON = {"Content-Type": "application/activity+json"}


def make_transport(**options: Any) -> LoopTransport:
    return LoopTransport(**options)


def client_sockets(port: int) -> int:
    """Descriptors of this process on TCP connections to ``port`` (Linux /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += link.startswith("socket:[") and link[8:-1] in inodes
    return count


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")
def test_closed_capped_and_cut_connections_leave_no_descriptor() -> None:
    transport = make_transport(max_response_bytes=10, total_timeout=0.5)
    with InboxServer() as server:
        server.behave("/bye", Behaviour(body=b"bye", headers={"Connection": "close"}))
        server.behave("/big", Behaviour(body=b"x" * 5000))
        server.behave("/slow", Behaviour(trickle=0.05, body=b"z" * 100))
        for _ in range(10):
            assert transport.post(server.url("/bye"), JSON, b"{}").body == b"bye"
            assert transport.post(server.url("/big"), JSON, b"{}").body == b"x" * 10
        with pytest.raises(TimedOut):
            transport.post(server.url("/slow"), JSON, b"{}")
        assert transport.post(server.url(), JSON, b"{}").status == 202
        assert server.connections == 22  # none of the 21 first could be used again
        assert client_sockets(server.port) == 1  # the idle connection
        transport.close()
        assert client_sockets(server.port) == 0


def tls_server(ca: Any, host: str = "127.0.0.1") -> InboxServer:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("inbox.test").configure_cert(context)
    return InboxServer(host, ssl_context=context)


def test_https_trickle_is_cut_at_the_total_budget(ca: Any, ca_file: str) -> None:
    resolver = lambda host, port: ["127.0.0.1"]  # noqa: E731
    transport = make_transport(ca_bundle=ca_file, total_timeout=1.0, resolver=resolver)
    with tls_server(ca) as srv:
        srv.behave("/inbox", Behaviour(trickle=0.05, body=b"z" * 500))
        started = time.monotonic()
        with pytest.raises(TimedOut, match="within 1 s"):
            transport.post(srv.url(host="inbox.test"), JSON, b"{}")
        assert 0.9 < time.monotonic() - started < 2.0
        assert transport.post(srv.url("/other", host="inbox.test"), JSON, b"{}").status == 202


def test_a_stalled_tls_handshake_is_a_connect_timeout_and_the_next_address_is_tried(
    ca: Any, ca_file: str
) -> None:
    with tls_server(ca, "127.0.0.2") as srv:
        stalled = socket.create_server(("127.0.0.3", srv.port))  # never accepts nor answers
        try:
            url = srv.url(host="inbox.test")
            alone = make_transport(
                ca_bundle=ca_file, connect_timeout=0.5, resolver=lambda h, p: ["127.0.0.3"]
            )
            with pytest.raises(TimedOut, match=r"connect to inbox\.test \(127\.0\.0\.3\)") as e:
                alone.post(url, JSON, b"{}")
            assert e.value.during_connect
            both = make_transport(
                ca_bundle=ca_file,
                connect_timeout=0.5,
                resolver=lambda h, p: ["127.0.0.3", "127.0.0.2"],
            )
            assert both.post(url, JSON, b"{}").status == 202
        finally:
            stalled.close()


def test_connections_of_forgotten_addresses_are_closed() -> None:
    transport = make_transport(max_pools=1, resolver=lambda host, port: ["127.0.0.1"])
    with InboxServer() as server:
        for name in ["a.test", "b.test"] * 4:
            assert transport.post(server.url(host=name), JSON, b"{}").status == 202
        assert server.connections == 8  # each address forgotten closed its connection


def test_chunked_answers_are_read_whole_and_keep_the_connection() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    transport = make_transport(total_timeout=2.0)
    with RawServer([[answer], [answer]]) as server:
        for _ in range(2):
            response = transport.post(server.url, JSON, b'{"a": 1}')
            assert (response.status, response.body) == (200, b"abcde")
        transport.close()
    assert server.connections == 1


def test_each_event_loop_keeps_its_own_connections() -> None:
    first = make_transport()
    second = LoopTransport(first.transport)  # the same Transport, on another loop
    with InboxServer() as server:
        for _ in range(3):
            assert first.post(server.url(), JSON, b"{}").status == 202
            assert second.post(server.url(), JSON, b"{}").status == 202
        assert server.connections == 2  # one kept alive per loop, never handed across
        first.close()
        second.close()

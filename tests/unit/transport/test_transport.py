"""The HTTP transport against loopback inbox servers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from django_outbox.transport import (
    BlockedAddress,
    ConnectFailed,
    ProtocolFailed,
    Response,
    TimedOut,
    TLSFailed,
    TransportError,
    retry_after_seconds,
)
from testproject.inbox_servers import Behaviour, InboxServer, ServerFarm
from tests.support.loop_transport import LoopTransport
from tests.support.tls_servers import tls_server

JSON = {"Content-Type": "application/activity+json"}


def make_transport(**options: Any) -> LoopTransport:
    return LoopTransport(**options)


@pytest.fixture
def server() -> Iterator[InboxServer]:
    with InboxServer() as srv:
        yield srv


@pytest.fixture
def transport() -> Iterator[LoopTransport]:
    client = make_transport()
    yield client
    client.close()


def test_statuses_headers_and_body_come_back(server: InboxServer, transport: LoopTransport) -> None:
    server.behave("/ok", Behaviour(body=b"thanks", headers={"X-Thing": "1"}))
    server.behave("/gone", Behaviour(statuses=(410,)))
    server.behave("/flaky", Behaviour(statuses=(500, 503, 202)))
    ok = transport.post(server.url("/ok"), JSON, b'{"type":"Create"}')
    assert (ok.status, ok.body, ok.headers["x-thing"]) == (202, b"thanks", "1")
    assert 0 < ok.elapsed < 5
    assert transport.post(server.url("/gone"), JSON, b"{}").status == 410
    statuses = [transport.post(server.url("/flaky"), JSON, b"{}").status for _ in range(4)]
    assert statuses == [500, 503, 202, 202]
    sent = server.requests("/ok")[0]
    assert sent.method == "POST" and sent.body == b'{"type":"Create"}'
    assert sent.headers["Host"] == f"127.0.0.1:{server.port}"
    assert sent.headers["User-Agent"] == "outbox-test/1"
    assert sent.headers["Content-Type"] == "application/activity+json"


def test_signed_host_header_is_sent_as_given(server: InboxServer, transport: LoopTransport) -> None:
    transport.post(server.url(), {"Host": "inbox.example", **JSON}, b"{}")
    assert server.requests()[0].headers.get_all("Host") == ["inbox.example"]


def test_redirects_are_returned_not_followed(server: InboxServer, transport: LoopTransport) -> None:
    location = server.url("/elsewhere")
    server.behave("/inbox", Behaviour(statuses=(302,), headers={"Location": location}))
    response = transport.post(server.url(), JSON, b"{}")
    assert response.status == 302
    assert response.headers["Location"] == location
    assert [r.path for r in server.requests()] == ["/inbox"]


def test_keep_alive_connection_is_reused(server: InboxServer, transport: LoopTransport) -> None:
    for _ in range(20):
        assert transport.post(server.url(), JSON, b"{}").status == 202
    assert server.connections == 1
    assert len(server.requests()) == 20


def test_response_body_is_capped_and_the_connection_dropped(server: InboxServer) -> None:
    transport = make_transport(max_response_bytes=1000)
    server.behave("/big", Behaviour(body=b"x" * 100_000))
    server.behave("/exact", Behaviour(body=b"y" * 1000))
    exact = transport.post(server.url("/exact"), JSON, b"{}")
    assert exact.body == b"y" * 1000
    assert server.connections == 1
    big = transport.post(server.url("/big"), JSON, b"{}")
    assert big.status == 202 and big.body == b"x" * 1000
    assert transport.post(server.url("/exact"), JSON, b"{}").status == 202
    assert server.connections == 2  # the capped response's connection was not reused


def test_trickling_server_is_cut_off_at_the_total_budget(server: InboxServer) -> None:
    transport = make_transport(total_timeout=1.5)
    server.behave("/inbox", Behaviour(trickle=0.1, body=b"z" * 200))
    started = time.monotonic()
    with pytest.raises(TimedOut, match=r"1\.5 s"):
        transport.post(server.url(), JSON, b"{}")
    assert 1.4 < time.monotonic() - started < 2.5


def test_after_a_timeout_the_next_request_gets_a_fresh_connection(server: InboxServer) -> None:
    transport = make_transport(total_timeout=0.5)
    server.behave("/slow", Behaviour(trickle=0.1, body=b"z" * 50))
    with pytest.raises(TimedOut):
        transport.post(server.url("/slow"), JSON, b"{}")
    assert transport.post(server.url(), JSON, b"{}").status == 202
    assert server.connections == 2


def test_close_delimited_trickle_is_a_timeout_not_a_short_body() -> None:
    """A body ended by closing the connection: the watchdog's cut must not look like its end."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            for _ in range(100):
                if stop.wait(0.05):
                    break
                try:
                    conn.sendall(b"x")
                except OSError:
                    break

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        transport = make_transport(total_timeout=0.6)
        port = listener.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(TimedOut):
            transport.post(f"http://127.0.0.1:{port}/inbox", JSON, b"{}")
        assert time.monotonic() - started < 1.5
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def test_hang_up_without_answer_is_a_protocol_failure(transport: LoopTransport) -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with pytest.raises(ProtocolFailed, match=r"closed the connection|lost|reset"):
            transport.post(f"http://127.0.0.1:{listener.getsockname()[1]}/", JSON, b"{}")
    finally:
        thread.join(10)
        listener.close()


def test_stalled_tls_handshake_is_bounded_by_the_connect_timeout() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # never accepts, never answers
    try:
        transport = make_transport(connect_timeout=0.5, total_timeout=10)
        started = time.monotonic()
        with pytest.raises(TimedOut):
            transport.post(f"https://127.0.0.1:{listener.getsockname()[1]}/", JSON, b"{}")
        assert time.monotonic() - started < 2.0
    finally:
        listener.close()


def test_silent_server_times_out(server: InboxServer) -> None:
    transport = make_transport(total_timeout=0.8)
    server.behave("/inbox", Behaviour(silent=True))
    started = time.monotonic()
    with pytest.raises(TimedOut):
        transport.post(server.url(), JSON, b"{}")
    assert time.monotonic() - started < 2.0
    assert len(server.requests()) == 1


def test_refused_port_raises_connect_failed(transport: LoopTransport) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectFailed, match="refused") as caught:
        transport.post(f"http://127.0.0.1:{port}/inbox", JSON, b"{}")
    assert not isinstance(caught.value, TLSFailed)
    assert len(str(caught.value)) < 200


def test_blocked_address_is_refused_before_connecting(server: InboxServer) -> None:
    strict = make_transport(allowed_networks=())
    with pytest.raises(BlockedAddress):
        strict.post(server.url(), JSON, b"{}")
    named = make_transport(allowed_networks=(), resolver=lambda host, port: ["127.0.0.1"])
    with pytest.raises(BlockedAddress, match=r"inbox\.test"):
        named.post(server.url(host="inbox.test"), JSON, b"{}")
    assert server.connections == 0


def test_connects_to_the_checked_address_and_caches_it() -> None:
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.2"]

    transport = make_transport(resolver=resolver)
    with InboxServer("127.0.0.2") as other:
        for _ in range(3):
            assert transport.post(other.url(host="inbox.test"), JSON, b"{}").status == 202
        assert calls == ["inbox.test"]
        assert other.requests()[0].headers["Host"] == f"inbox.test:{other.port}"


def test_next_address_is_tried_only_when_nothing_was_sent() -> None:
    with InboxServer("127.0.0.2") as srv:
        # nothing listens on 127.0.0.3 at that port: refused, so the next address is tried
        transport = make_transport(resolver=lambda host, port: ["127.0.0.3", "127.0.0.2"])
        assert transport.post(srv.url(host="inbox.test"), JSON, b"{}").status == 202
        # a silent first address got the request: no second copy to another address
        srv.behave("/inbox", Behaviour(silent=True))
        with InboxServer("127.0.0.4", srv.port) as other:
            both = make_transport(
                total_timeout=0.5, resolver=lambda host, port: ["127.0.0.2", "127.0.0.4"]
            )
            with pytest.raises(TimedOut):
                both.post(srv.url(host="inbox.test"), JSON, b"{}")
            assert other.requests() == []


def test_two_names_on_one_address_get_separate_connections(server: InboxServer) -> None:
    transport = make_transport(resolver=lambda host, port: ["127.0.0.1"])
    for name in ("a.test", "b.test", "a.test", "b.test"):
        transport.post(server.url(host=name), JSON, b"{}")
    assert server.connections == 2
    hosts = {r.connection: r.headers["Host"].split(":")[0] for r in server.requests()}
    assert sorted(hosts.values()) == ["a.test", "b.test"]


def test_ipv6_literal() -> None:
    try:
        srv = InboxServer("::1").start()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        transport = make_transport(allowed_networks=["::1/128"])
        assert transport.post(srv.url(), JSON, b"{}").status == 202
        assert srv.requests()[0].headers["Host"] == f"[::1]:{srv.port}"
    finally:
        srv.stop()


def test_invalid_url_is_a_transport_error(transport: LoopTransport) -> None:
    with pytest.raises(TransportError, match="invalid URL"):
        transport.post("ftp://example.com/inbox", JSON, b"{}")


def test_https_uses_the_host_name_for_sni_and_certificate(ca: Any, ca_file: str) -> None:
    seen: list[str] = []
    transport = make_transport(ca_bundle=ca_file, resolver=lambda host, port: ["127.0.0.1"])
    with tls_server(ca, "a.test", "b.test", seen=seen) as srv:
        assert transport.post(srv.url(host="a.test"), JSON, b"{}").status == 202
        assert transport.post(srv.url(host="a.test"), JSON, b"{}").status == 202
        assert transport.post(srv.url(host="b.test"), JSON, b"{}").status == 202
        assert seen == ["a.test", "b.test"]
        # one keep-alive connection per host name although both live on one IP
        assert srv.connections == 2
        assert [r.headers["Host"] for r in srv.requests()] == [
            f"a.test:{srv.port}",
            f"a.test:{srv.port}",
            f"b.test:{srv.port}",
        ]


def test_https_certificate_for_another_name_fails(ca: Any, ca_file: str) -> None:
    transport = make_transport(ca_bundle=ca_file, resolver=lambda host, port: ["127.0.0.1"])
    with tls_server(ca, "other.test") as srv:
        with pytest.raises(TLSFailed, match="TLS failed"):
            transport.post(srv.url(host="inbox.test"), JSON, b"{}")
        assert srv.requests() == []


def test_https_untrusted_ca_fails(ca: Any) -> None:
    transport = make_transport(resolver=lambda host, port: ["127.0.0.1"])
    with tls_server(ca, "inbox.test") as srv, pytest.raises(TLSFailed):
        transport.post(srv.url(host="inbox.test"), JSON, b"{}")


def test_many_threads_only_the_slow_requests_time_out(server: InboxServer) -> None:
    transport = make_transport(total_timeout=1.0)
    server.behave("/slow", Behaviour(trickle=0.05, body=b"s" * 1000))
    results: list[Response | TransportError] = []
    lock = threading.Lock()

    def work(path: str, count: int) -> None:
        for _ in range(count):
            try:
                outcome: Response | TransportError = transport.post(server.url(path), JSON, b"{}")
            except TransportError as error:
                outcome = error
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=work, args=("/inbox", 40)) for _ in range(8)]
    threads += [threading.Thread(target=work, args=("/slow", 1)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    failures = [r for r in results if isinstance(r, TransportError)]
    assert len(results) == 8 * 40 + 3
    assert len(failures) == 3 and all(isinstance(f, TimedOut) for f in failures)
    assert all(r.status == 202 for r in results if isinstance(r, Response))


def test_server_farm_hosts_are_distinct_addresses() -> None:
    # A short wait for the silent hosts only: on a busy machine an answering host may
    # take longer than that to answer.
    impatient, patient = make_transport(total_timeout=0.3), make_transport(total_timeout=10)
    with ServerFarm(20, silent_fraction=0.1, behaviour=Behaviour(statuses=(201,))) as farm:
        urls, silent = farm.urls(), {server.url() for server in farm.silent}
        assert len({url.split("//")[1].split(":")[0] for url in urls}) == 20
        assert len(silent) == 2
        for url in urls:
            if url in silent:
                with pytest.raises(TimedOut):
                    impatient.post(url, JSON, b"{}")
            else:
                assert patient.post(url, JSON, b"{}").status == 201
        assert farm.request_count() == 20


NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        ("-5", 0.0),
        (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),
        ("Thu, 01 Jan 2026 11:00:00 GMT", 0.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("1.5", None),
        ("Thu, 99 Foo 2026", None),
        ("9" * 5000, None),
    ],
)
def test_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert retry_after_seconds(value, NOW) == expected


def test_retry_after_date_defaults_to_now() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=60), usegmt=True)
    seconds = retry_after_seconds(later)
    assert seconds is not None and 55 < seconds <= 60


def test_a_server_silent_longer_than_the_read_timeout_is_cut_before_the_budget(
    server: InboxServer,
) -> None:
    transport = make_transport(total_timeout=10.0, read_timeout=0.5)
    server.behave("/inbox", Behaviour(silent=True))
    started = time.monotonic()
    with pytest.raises(TimedOut, match="without a byte"):
        transport.post(server.url(), JSON, b"{}")
    assert time.monotonic() - started < 3.0


def test_a_server_that_keeps_sending_outlasts_the_read_timeout(server: InboxServer) -> None:
    transport = make_transport(total_timeout=10.0, read_timeout=0.3)
    server.behave("/inbox", Behaviour(trickle=0.1, body=b"t" * 12))
    started = time.monotonic()
    assert transport.post(server.url(), JSON, b"{}").body == b"t" * 12
    assert time.monotonic() - started > 0.9, "quiet for less than 0.3 s at a time, for longer"

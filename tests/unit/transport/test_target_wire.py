"""What a server receives is exactly Target.path and Target.host_header.

A loopback server records the raw request line and the Host headers; the request goes
through http.client and through urllib3's connection class, which the transport uses.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import urllib3.connection
from hypothesis import HealthCheck, given, settings

from django_outbox.transport.target import Target, parse_target
from tests.support.inbox_url_samples import ACCEPTED, TYPICAL, VALID_URLS


class _Recorder(BaseHTTPRequestHandler):
    """Answers 204 and records (request target, Host headers) as they came."""

    server: _Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        # self.path is rewritten for targets starting with "//"; the request line is not.
        self.server.seen.append((self.requestline.split(" ")[1], self.headers.get_all("Host")))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    seen: list[tuple[str, list[str] | None]]


@pytest.fixture(scope="module")
def recorder() -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Recorder)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _http_client(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=5)


def _urllib3(port: int) -> http.client.HTTPConnection:
    return urllib3.connection.HTTPConnection("127.0.0.1", port, timeout=5)


CLIENTS = [pytest.param(_http_client, id="http.client"), pytest.param(_urllib3, id="urllib3")]


def _post(server: _Server, connect: Callable[[int], Any], target: Target) -> None:
    """POST to the recorder as the transport would to ``target``'s address."""
    conn = connect(server.server_address[1])
    try:
        conn.request("POST", target.path, body=b"{}", headers={"Host": target.host_header})
        response = conn.getresponse()
        response.read()
        assert response.status == 204
    finally:
        conn.close()
    assert server.seen[-1] == (target.path, [target.host_header])


@pytest.mark.parametrize("connect", CLIENTS)
@pytest.mark.parametrize("url", [row[0] for row in ACCEPTED] + TYPICAL)
def test_server_receives_target_path_and_host(
    recorder: _Server, connect: Callable[[int], Any], url: str
) -> None:
    _post(recorder, connect, parse_target(url))


@pytest.mark.parametrize("connect", CLIENTS)
def test_server_receives_generated_targets(
    recorder: _Server, connect: Callable[[int], Any]
) -> None:
    @settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(VALID_URLS)
    def check(url: str) -> None:
        _post(recorder, connect, parse_target(url))

    check()

"""A fake LND REST API on loopback: the two calls a sender makes, in LND's shapes.

* ``POST /v1/channels/transactions`` (SendPaymentSync): ``payment_request``,
  ``amt_msat``, ``fee_limit.fixed_msat`` in; ``payment_error`` or
  ``payment_preimage``/``payment_hash`` (base64) and ``payment_route`` out.  A request
  LND rejects before paying (amount rules, expired, wrong network) is an HTTP 500
  with grpc-gateway's ``{"code", "message", "details"}`` body.
* ``GET /v2/router/track/{hash}`` (TrackPaymentV2, hash in base64): a chunked stream of
  ``{"result": Payment}`` lines; an unknown hash is ``{"error": {"code": 5, "message":
  "payment isn't initiated"}}`` with HTTP 404.  An in-flight payment's stream stays
  open (up to ``stream_hold`` seconds) as LND's does.

A wrong ``Grpc-Metadata-macaroon`` gets 401.  Switches: ``status_next`` (answer the
next calls with these HTTP statuses), ``hang_after_paying`` (pay, then answer only
after that many seconds: the client times out although the payment went through),
``delay`` (every call waits that many seconds before it is served: a slow node),
``pay_delay`` (a payment takes that many seconds more: the time a real node spends
finding a route and settling; look-ups are not slowed).
``in_flight`` counts the calls being served.
Plain HTTP unless an ``ssl_context`` is given (e.g. from ``trustme``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import ssl
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from testproject.lightning.node import FakeNode, NodePayment, Refused

_STATUS = {"complete": "SUCCEEDED", "pending": "IN_FLIGHT", "failed": "FAILED"}


@dataclass(frozen=True)
class LndCall:
    """One request the fake LND received (the macaroon is not kept)."""

    method: str
    path: str
    body: Any
    status: int


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _payment_json(payment: NodePayment, preimage: bytes) -> dict[str, Any]:
    """A ``lnrpc.Payment`` as LND's REST proxy writes it (int64 as strings)."""
    settled = payment.status == "complete"
    reason = payment.failure_reason.upper() if payment.failure_reason else "NONE"
    return {
        "payment_hash": payment.payment_hash,
        "value": str(payment.amount_msat // 1000),
        "creation_date": str(int(payment.created_at)),
        "fee": str(payment.fee_msat // 1000),
        "payment_preimage": (preimage if settled else bytes(32)).hex(),
        "value_sat": str(payment.amount_msat // 1000),
        "value_msat": str(payment.amount_msat),
        "payment_request": payment.invoice,
        "status": _STATUS[payment.status],
        "fee_sat": str(payment.fee_msat // 1000),
        "fee_msat": str(payment.fee_msat),
        "creation_time_ns": str(int(payment.created_at * 1e9)),
        "htlcs": [],
        "payment_index": "1",
        "failure_reason": f"FAILURE_REASON_{reason}",
    }


class FakeLndServer:
    """A fake LND REST listener on ``host`` paying through ``node``.  Use as a context
    manager or with :meth:`start`/:meth:`stop`; ``url`` and ``macaroon_hex`` configure
    the client; ``calls`` records every request."""

    def __init__(
        self,
        node: FakeNode,
        *,
        host: str = "127.0.0.1",
        macaroon: bytes | None = None,
        ssl_context: ssl.SSLContext | None = None,
        stream_hold: float = 2.0,
    ) -> None:
        self.node, self.host, self.ssl_context = node, host, ssl_context
        self.macaroon = macaroon or os.urandom(32)
        self.stream_hold = stream_hold
        self.hang_after_paying = 0.0
        self.delay = 0.0
        self.pay_delay = 0.0
        self.in_flight = 0
        self.status_next: list[int] = []
        self.calls: list[LndCall] = []
        #: Connections accepted so far (a client that keeps them alive opens few).
        self.connections = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: QuietHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def macaroon_hex(self) -> str:
        """The macaroon a client must send, as hex."""
        return self.macaroon.hex()

    @property
    def url(self) -> str:
        """``http(s)://127.0.0.1:<port>``."""
        assert self._server is not None, "not started"
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{self.host}:{self._server.server_address[1]}"

    def start(self) -> FakeLndServer:
        """Listen on a free port and serve in a daemon thread; returns self."""
        self._server = QuietHTTPServer((self.host, 0), _handler_for(self))
        if self.ssl_context is not None:
            self._server.socket = self.ssl_context.wrap_socket(
                self._server.socket, server_side=True
            )
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; hanging answers are released."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeLndServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _record(self, call: LndCall) -> None:
        with self._lock:
            self.calls.append(call)

    def _forced_status(self) -> int | None:
        with self._lock:
            return self.status_next.pop(0) if self.status_next else None

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds`` or until stopped."""
        self._stopping.wait(seconds)

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Serve one call: counted in ``in_flight``, after ``delay`` seconds."""
        with self._lock:
            self.in_flight += 1
        try:
            self.wait(self.delay)
            yield
        finally:
            with self._lock:
                self.in_flight -= 1


class QuietHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that does not print clients hanging up (tests time out
    on purpose) or failing the TLS handshake."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLError | TimeoutError):
            super().handle_error(request, client_address)


def _handler_for(server: FakeLndServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The headers and the body are two writes: with Nagle's algorithm the body would
        # wait for the client's delayed ACK (40 ms a call), which LND does not make it.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet tests

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server.connections += 1

        def _send(self, status: int, body: Any, call_body: Any = None) -> None:
            server._record(LndCall(self.command, self.path, call_body, status))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self, call_body: Any) -> bool:
            if self.headers.get("Grpc-Metadata-macaroon", "").lower() == server.macaroon_hex:
                forced = server._forced_status()
                if forced is None:
                    return True
                self._send(forced, {"code": 2, "message": "internal error", "details": []})
                return False
            message = "verification failed: signature mismatch after caveat verification"
            self._send(401, {"code": 16, "message": message, "details": []}, call_body)
            return False

        def do_POST(self) -> None:
            with server.serving():
                self._post()

        def do_GET(self) -> None:
            with server.serving():
                self._get()

        def _post(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = None
            if not self._authorized(body):
                return
            if urlsplit(self.path).path != "/v1/channels/transactions" or not isinstance(
                body, dict
            ):
                self._send(404, {"code": 5, "message": "Not Found", "details": []}, body)
                return
            self._pay(body)

        def _pay(self, body: dict[str, Any]) -> None:
            server.wait(server.pay_delay)
            amount = body.get("amt_msat")
            fee_limit = (body.get("fee_limit") or {}).get("fixed_msat")
            try:
                payment = server.node.pay(
                    str(body.get("payment_request", "")),
                    int(amount) if amount not in (None, "", "0", 0) else None,
                    int(fee_limit) if fee_limit is not None else 1 << 62,
                )
            except Refused as refusal:
                if refusal.kind == "invalid":
                    error = {"code": 2, "message": refusal.message, "details": []}
                    self._send(500, error, body)
                else:
                    answer = {
                        "payment_error": refusal.message,
                        "payment_preimage": "",
                        "payment_route": None,
                        "payment_hash": "",
                    }
                    self._send(200, answer, body)
                return
            answer = {
                "payment_error": payment.failure_reason,
                "payment_preimage": "",
                "payment_route": None,
                "payment_hash": _b64(bytes.fromhex(payment.payment_hash)),
            }
            if payment.status == "complete":
                server.wait(server.hang_after_paying)
                answer["payment_preimage"] = _b64(server.node.answered_preimage(payment))
                total = payment.amount_msat + payment.fee_msat
                answer["payment_route"] = {
                    "total_time_lock": 200,
                    "total_fees": str(payment.fee_msat // 1000),
                    "total_amt": str(total // 1000),
                    "hops": [],
                    "total_fees_msat": str(payment.fee_msat),
                    "total_amt_msat": str(total),
                }
            self._send(200, answer, body)

        def _get(self) -> None:
            if not self._authorized(None):
                return
            path = urlsplit(self.path).path
            prefix = "/v2/router/track/"
            try:
                if not path.startswith(prefix):
                    raise ValueError(path)
                text = unquote(path[len(prefix) :])
                raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_")
                if len(raw) != 32:
                    raise ValueError(path)
            except (ValueError, binascii.Error):
                self._send(404, {"code": 5, "message": "Not Found", "details": []})
                return
            payment = server.node.lookup(raw.hex())
            if payment is None:
                error = {"code": 5, "message": "payment isn't initiated", "details": []}
                self._send(404, {"error": error})
                return
            line = {"result": _payment_json(payment, server.node.answered_preimage(payment))}
            server._record(LndCall(self.command, self.path, None, 200))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._chunk(json.dumps(line).encode() + b"\n")
            if payment.status == "pending":
                server.wait(server.stream_hold)  # LND keeps the stream open until final
            self._chunk(b"")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler

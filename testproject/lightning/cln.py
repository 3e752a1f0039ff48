"""A fake Core Lightning JSON-RPC socket: ``pay`` and ``listpays`` as pyln-client speaks them.

pyln-client opens a unix socket per call, writes one JSON-RPC 2.0 request (no
delimiter) and reads a JSON object terminated by a blank line.  Answers follow the
Core Lightning reference: ``pay`` returns ``payment_preimage``, ``payment_hash``,
``amount_msat``, ``amount_sent_msat``, ``status``, or an error object with the
documented codes (200 in progress, 203 permanent failure at destination, 205 no
route, 207 invoice expired, -32602 bad parameters); paying a settled invoice again
returns the earlier success.  ``listpays`` returns ``pays`` with ``preimage`` once
complete.

Switches: ``hang_after_paying`` (pay, answer that many seconds later), ``drop_next``
(close the next connections without answering).
"""

from __future__ import annotations

import json
import os
import socketserver
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from testproject.lightning.node import FakeNode, NodePayment, Refused

_FAILURE_CODES = {"no_route": 205, "incorrect_payment_details": 203, "timeout": 210}
_MAX_REQUEST = 1 << 20


def _amount(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.endswith("msat"):
        value = value[:-4]
    return int(value)


class _QuietUnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            super().handle_error(request, client_address)


class FakeClnServer:
    """A fake ``lightning-rpc`` socket paying through ``node``; ``path`` is the socket
    to give the client, ``calls`` records (method, params) of every request."""

    def __init__(self, node: FakeNode, path: str | Path | None = None) -> None:
        self.node = node
        self._dir = None if path else tempfile.mkdtemp(prefix="cln-")
        self.path = str(path or Path(self._dir or ".") / "lightning-rpc")
        self.hang_after_paying = 0.0
        self.drop_next = 0
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _QuietUnixServer | None = None

    def start(self) -> FakeClnServer:
        """Listen on :attr:`path` and serve in a daemon thread; returns self."""
        self._server = _QuietUnixServer(self.path, _handler_for(self))
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if os.path.exists(self.path):
            os.unlink(self.path)
        if self._dir:
            os.rmdir(self._dir)

    def __enter__(self) -> FakeClnServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _dropping(self) -> bool:
        with self._lock:
            if self.drop_next:
                self.drop_next -= 1
                return True
            return False

    def answer(self, method: str, params: Any) -> dict[str, Any]:
        """The JSON-RPC ``result`` or ``error`` member for one call."""
        with self._lock:
            self.calls.append((method, params))
        if not isinstance(params, dict):
            return {"error": {"code": -32602, "message": "use named parameters"}}
        if method == "pay":
            return self._pay(params)
        if method == "listpays":
            wanted = params.get("payment_hash")
            mine = [self._pay_json(p) for p in self.node.attempts if p.payment_hash == wanted]
            return {"result": {"pays": mine}}
        return {"error": {"code": -32601, "message": f"Unknown command '{method}'"}}

    def _pay(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            payment = self.node.pay(
                str(params.get("bolt11", "")),
                _amount(params.get("amount_msat")),
                _amount(params.get("maxfee")) or 1 << 62,
            )
        except Refused as refusal:
            if refusal.kind == "paid":
                earlier = self.node.lookup(refusal.payment_hash)
                assert earlier is not None
                return {"result": self._pay_result(earlier)}
            code = 200 if refusal.kind == "in_flight" else -32602
            code = 207 if "expired" in refusal.message else code
            return {"error": {"code": code, "message": refusal.message}}
        if payment.status != "complete":
            code = _FAILURE_CODES.get(payment.failure_reason, -1)
            return {"error": {"code": code, "message": payment.failure_reason, "data": {}}}
        self._stopping.wait(self.hang_after_paying)
        return {"result": self._pay_result(payment)}

    def _pay_result(self, payment: NodePayment) -> dict[str, Any]:
        return {
            "destination": "02" + "11" * 32,
            "payment_hash": payment.payment_hash,
            "created_at": payment.created_at,
            "parts": 1,
            "amount_msat": payment.amount_msat,
            "amount_sent_msat": payment.amount_msat + payment.fee_msat,
            "payment_preimage": self.node.answered_preimage(payment).hex(),
            "status": "complete",
        }

    def _pay_json(self, payment: NodePayment) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "payment_hash": payment.payment_hash,
            "status": payment.status,
            "created_at": int(payment.created_at),
            "bolt11": payment.invoice,
            "amount_msat": payment.amount_msat,
            "amount_sent_msat": payment.amount_msat + payment.fee_msat,
        }
        if payment.status == "complete":
            entry["preimage"] = self.node.answered_preimage(payment).hex()
        return entry


def _handler_for(server: FakeClnServer) -> type[socketserver.BaseRequestHandler]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            buffer, decoder = "", json.JSONDecoder()
            while len(buffer) < _MAX_REQUEST:
                data = self.request.recv(65536)
                if not data:
                    return
                buffer += data.decode("utf-8")
                try:
                    request, end = decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    continue  # not a whole object yet
                buffer = buffer.lstrip()[end:]
                if server._dropping():
                    return
                reply = {"jsonrpc": "2.0", "id": request.get("id")}
                reply.update(server.answer(request.get("method", ""), request.get("params")))
                self.request.sendall(json.dumps(reply).encode() + b"\n\n")

    return Handler

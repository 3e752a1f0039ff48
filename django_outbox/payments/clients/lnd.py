"""Pay through LND's REST API (``urllib3``, which ``requests`` is built on: no gRPC stubs,
no extra dependency).

Endpoints (LND API reference, lightning.engineering/api-docs/api/lnd):

* ``POST /v1/channels/transactions`` (``SendPaymentSync``): body ``payment_request``,
  ``amt_msat`` for an amountless invoice, ``fee_limit.fixed_msat``; answers
  ``payment_error`` (a refusal, in words) or ``payment_preimage`` and ``payment_hash``
  (protobuf bytes, so base64 in JSON) and ``payment_route.total_fees_msat``.
* ``GET /v2/router/track/{payment_hash}`` (``TrackPaymentV2``, hash as URL-safe base64):
  a stream of ``{"result": Payment}`` lines whose first is the current state
  (``status`` SUCCEEDED / IN_FLIGHT / FAILED / INITIATED, ``payment_preimage`` hex);
  an unknown hash answers ``{"error": {"code": 5, "message": "payment isn't initiated"}}``.

Authentication is the macaroon as hex in ``Grpc-Metadata-macaroon``; TLS is pinned to
LND's own ``tls.cert``.  One pool of kept-alive connections per client, shared by the
payment threads, which ignores proxy settings from the environment.  It is a
``urllib3`` pool rather than a ``requests.Session``: a ``lookup`` through a session
cost the calling thread 0.50 ms of CPU on the benchmark machine, 0.22 ms through the
pool (``python -m bench.node_calls``); a paid delivery makes two node calls, on the
worker that also serves the free hosts.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import urllib3
from requests.utils import DEFAULT_CA_BUNDLE_PATH
from urllib3.exceptions import HTTPError

from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.payments.clients import (
    Payment,
    PaymentState,
    PaymentStatus,
    check_hash,
    settle_refusal,
    verified_preimage,
)
from django_outbox.payments.errors import PaymentClientError, PaymentUnauthorized
from django_outbox.payments.invoices import decode_invoice

#: Most bytes read from one answer or stream line: LND's are a few kilobytes.
MAX_ANSWER_BYTES = 1024 * 1024
#: Connections a client keeps alive for reuse (more are opened when more threads call at
#: once, and closed after).
KEPT_CONNECTIONS = 10
_STATES = {
    "SUCCEEDED": PaymentState.COMPLETE,
    "FAILED": PaymentState.FAILED,
    "IN_FLIGHT": PaymentState.PENDING,
    "INITIATED": PaymentState.PENDING,
    # Deprecated, "never returned"; if it is, assume the worst: maybe in flight.
    "UNKNOWN": PaymentState.PENDING,
}
_NOT_FOUND = 5  # gRPC NOT_FOUND: "payment isn't initiated"


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError("not a string")
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_")
    except binascii.Error as exc:
        raise ValueError("not base64") from exc


def _msat(value: Any) -> int:
    """An int64 field, which protobuf JSON writes as a string."""
    return int(value) if isinstance(value, int | str) and str(value).isdigit() else 0


@dataclass
class LndRestClient:
    """A :class:`~django_outbox.payments.clients.PaymentClient` for LND's REST API.

    ``url`` is the REST listener (``https://host:8080``); give ``macaroon_path`` (e.g.
    ``.../admin.macaroon``) or ``macaroon_hex``; ``tls_cert_path`` is LND's
    ``tls.cert`` (None: the public CAs that ``requests`` trusts, certifi's, for an LND
    behind a proxy with a public certificate).  ``timeout`` bounds each call in seconds.
    """

    url: str
    macaroon_path: str | Path | None = None
    macaroon_hex: str | None = field(default=None, repr=False)
    tls_cert_path: str | Path | None = None
    timeout: float = 60.0
    _pool: urllib3.HTTPConnectionPool = field(init=False, repr=False)
    _prefix: str = field(init=False, repr=False)
    _headers: dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OutboxConfigurationError("the LND REST url must be http(s)://host:port")
        if (self.macaroon_path is None) == (self.macaroon_hex is None):
            raise OutboxConfigurationError("give exactly one of macaroon_path and macaroon_hex")
        if self.macaroon_path is not None:
            try:
                self.macaroon_hex = Path(self.macaroon_path).read_bytes().hex()
            except OSError as exc:
                raise OutboxConfigurationError(f"cannot read the LND macaroon: {exc}") from None
        assert self.macaroon_hex is not None
        try:
            bytes.fromhex(self.macaroon_hex)
        except ValueError:
            raise OutboxConfigurationError("macaroon_hex is not hex") from None
        if self.timeout <= 0:
            raise OutboxConfigurationError("the LND timeout must be positive")
        self.url = self.url.rstrip("/")
        self._prefix = parts.path.rstrip("/")
        options: dict[str, Any] = {
            "maxsize": KEPT_CONNECTIONS,
            "retries": False,
            "timeout": urllib3.Timeout(connect=min(5.0, self.timeout), read=self.timeout),
        }
        if parts.scheme == "https":
            ca_certs = str(self.tls_cert_path) if self.tls_cert_path else DEFAULT_CA_BUNDLE_PATH
            self._pool = urllib3.HTTPSConnectionPool(
                parts.hostname, parts.port, cert_reqs="CERT_REQUIRED", ca_certs=ca_certs, **options
            )
        else:
            self._pool = urllib3.HTTPConnectionPool(parts.hostname, parts.port, **options)
        self._headers = {"Grpc-Metadata-macaroon": self.macaroon_hex}

    def close(self) -> None:
        """Close the pool's connections."""
        self._pool.close()

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> urllib3.BaseHTTPResponse:
        headers = self._headers
        data = None
        if body is not None:
            headers = {**headers, "Content-Type": "application/json"}
            data = json.dumps(body).encode()
        try:
            response = self._pool.urlopen(
                method,
                self._prefix + path,
                body=data,
                headers=headers,
                redirect=False,
                preload_content=False,
            )
        except urllib3.exceptions.TimeoutError:
            raise PaymentClientError(f"LND did not answer within {self.timeout:g} s") from None
        except HTTPError as exc:
            raise PaymentClientError(f"cannot reach LND: {type(exc).__name__}") from None
        if response.status in (401, 403):
            response.close()
            raise PaymentUnauthorized(f"LND refused the macaroon (HTTP {response.status})")
        return response

    def _first_json(self, response: urllib3.BaseHTTPResponse) -> dict[str, Any]:
        """The first JSON object of the answer (the whole body, or a stream's first line).

        A body read to its end leaves its connection to the pool; a stream left open
        (LND streams a payment's updates until it is final) closes it."""
        data, deadline, ended = b"", time.monotonic() + self.timeout, True
        try:
            for chunk in response.stream(8192):
                data += chunk
                if b"\n" in data or len(data) > MAX_ANSWER_BYTES:
                    ended = response.length_remaining == 0
                    break
                if time.monotonic() > deadline:
                    raise PaymentClientError(f"LND did not answer within {self.timeout:g} s")
        except urllib3.exceptions.TimeoutError:
            ended = False
            raise PaymentClientError(f"LND did not answer within {self.timeout:g} s") from None
        except HTTPError as exc:
            ended = False
            raise PaymentClientError(f"LND's answer broke off: {type(exc).__name__}") from None
        except PaymentClientError:
            ended = False
            raise
        finally:
            if ended:
                response.release_conn()
            else:
                response.close()
        line = data.split(b"\n", 1)[0]
        try:
            decoded = json.loads(line[:MAX_ANSWER_BYTES])
        except ValueError:
            raise PaymentClientError(f"LND answered HTTP {response.status} with no JSON") from None
        if not isinstance(decoded, dict):
            raise PaymentClientError(f"LND answered HTTP {response.status} with no object")
        return decoded

    def pay(self, invoice: str, amount_msat: int | None, max_fee_msat: int) -> Payment:
        """Pay with ``SendPaymentSync`` (see :class:`~.clients.PaymentClient`)."""
        decoded = decode_invoice(invoice)
        payment_hash = decoded.payment_hash
        body: dict[str, Any] = {
            "payment_request": invoice,
            "fee_limit": {"fixed_msat": str(max_fee_msat)},
        }
        if amount_msat is not None:
            body["amt_msat"] = str(amount_msat)
        answer = self._first_json(self._request("POST", "/v1/channels/transactions", body))
        if "payment_error" not in answer and "payment_preimage" not in answer:
            message = answer.get("message") or answer.get("error") or "no payment fields"
            raise PaymentClientError(f"LND did not say whether it paid: {str(message)[:200]}")
        if answer.get("payment_error"):
            return settle_refusal(self.lookup(payment_hash), str(answer["payment_error"])[:500])
        try:
            preimage, answered_hash = _b64(answer["payment_preimage"]), _b64(answer["payment_hash"])
        except (KeyError, ValueError):
            raise PaymentClientError("LND's answer has no readable preimage or hash") from None
        if answered_hash.hex() != payment_hash:
            raise PaymentClientError("LND answered for another payment hash")
        route = answer.get("payment_route") or {}
        fee = _msat(route.get("total_fees_msat"))
        total = _msat(route.get("total_amt_msat"))
        amount = total - fee if total else (amount_msat or decoded.amount_msat or 0)
        return Payment(verified_preimage(preimage, payment_hash), payment_hash, amount, fee)

    def lookup(self, payment_hash: str) -> PaymentStatus:
        """Ask ``TrackPaymentV2`` for the current state (its first streamed update)."""
        payment_hash = check_hash(payment_hash)
        encoded = base64.urlsafe_b64encode(bytes.fromhex(payment_hash)).decode("ascii")
        answer = self._first_json(self._request("GET", f"/v2/router/track/{encoded}"))
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            if error.get("code") == _NOT_FOUND:
                return PaymentStatus(PaymentState.UNKNOWN, payment_hash)
            raise PaymentClientError(f"LND could not track: {str(error.get('message'))[:200]}")
        result = answer.get("result")
        if not isinstance(result, dict) or result.get("status") not in _STATES:
            raise PaymentClientError("LND's track answer has no payment status")
        state = _STATES[result["status"]]
        if state is not PaymentState.COMPLETE:
            reason = str(result.get("failure_reason", ""))[:200]
            return PaymentStatus(state, payment_hash, reason=reason)
        try:
            preimage = bytes.fromhex(str(result.get("payment_preimage", "")))
        except ValueError:
            preimage = b""
        fee = _msat(result.get("fee_msat"))
        payment = Payment(
            verified_preimage(preimage, payment_hash),
            payment_hash,
            _msat(result.get("value_msat")),
            fee,
        )
        return PaymentStatus(state, payment_hash, payment)

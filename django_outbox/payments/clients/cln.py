"""Pay through Core Lightning's JSON-RPC unix socket with ``pyln-client``.

``pyln-client`` is an optional dependency (``django-outbox[cln]``), imported when the
first call is made, so the package works without it.  Calls (Core Lightning reference,
docs.corelightning.org/reference):

* ``pay bolt11 [amount_msat] [maxfee] [retry_for]``: answers ``payment_preimage``,
  ``payment_hash``, ``amount_msat``, ``amount_sent_msat`` and ``status``
  (``complete``/``pending``/``failed``), or a JSON-RPC error (205 no route, 206 route
  too expensive, 207 invoice expired, 210 timed out with nothing in flight, ...).
* ``listpays payment_hash``: ``pays``, each with ``status`` and, once complete,
  ``preimage``.

``pyln-client`` sets no socket timeout; :class:`ClnClient` sets ``timeout`` on each
call's socket, so a node that never answers costs at most that long.  ``retry_for``
(seconds Core Lightning keeps trying routes) should stay below ``timeout``.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.payments.clients import (
    Payment,
    PaymentState,
    PaymentStatus,
    check_hash,
    settle_refusal,
    verified_preimage,
)
from django_outbox.payments.errors import (
    PaymentClientError,
    PaymentError,
    PaymentFailed,
    PaymentPending,
)
from django_outbox.payments.invoices import decode_invoice

# pyln-client logs every answer at DEBUG, preimages included: give it a logger that is
# attached to no handler and drops everything below CRITICAL.
_MUTED = logging.Logger("django_outbox.payments.clients.cln.pyln", logging.CRITICAL)


def _msat(value: Any) -> int:
    """An amount as Core Lightning writes it: an int, or ``"123msat"`` (older versions)."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("msat") and value[:-4].isdigit():
        return int(value[:-4])
    return 0


@functools.cache
def _rpc_class() -> Any:
    """``LightningRpc`` with a timeout on every call's socket (pyln-client sets none)."""
    try:
        from pyln.client import LightningRpc
    except ImportError:
        raise OutboxConfigurationError(
            "ClnClient needs pyln-client: pip install 'django-outbox[cln]'"
        ) from None

    class TimedLightningRpc(LightningRpc):  # type: ignore[misc]
        timeout: float = 60.0

        def _writeobj(self, sock: Any, obj: Any) -> None:
            # Called once per call, on the fresh socket, before the request is sent.
            sock.sock.settimeout(self.timeout)
            super()._writeobj(sock, obj)

    return TimedLightningRpc


@dataclass
class ClnClient:
    """A :class:`~django_outbox.payments.clients.PaymentClient` for Core Lightning.

    ``rpc_path`` is the node's ``lightning-rpc`` socket; ``timeout`` bounds each call
    in seconds; ``retry_for`` is passed to ``pay``.
    """

    rpc_path: str | Path
    #: Seconds: three calls of it, with the request after them, fit the default lease.
    timeout: float = 70.0
    retry_for: int = 60

    def __post_init__(self) -> None:
        if self.timeout <= 0 or not 0 < self.retry_for < self.timeout:
            raise OutboxConfigurationError("need 0 < retry_for < timeout for ClnClient")

    def _call(self, method: str, **params: Any) -> dict[str, Any]:
        from pyln.client import RpcError

        rpc = _rpc_class()(str(self.rpc_path), logger=_MUTED)
        rpc.timeout = self.timeout
        try:
            result = getattr(rpc, method)(**params)
        except RpcError as exc:
            error = exc.error
            if isinstance(error, dict) and isinstance(error.get("code"), int):
                raise _Refused(f"{error['code']}: {str(error.get('message', ''))[:300]}") from None
            raise PaymentClientError("lost the connection to Core Lightning") from None
        except TimeoutError:
            raise PaymentClientError(
                f"Core Lightning did not answer within {self.timeout:g} s"
            ) from None
        except (OSError, ValueError, TypeError) as exc:
            raise PaymentClientError(f"cannot ask Core Lightning: {type(exc).__name__}") from None
        if not isinstance(result, dict):
            raise PaymentClientError("Core Lightning's answer is not an object")
        return result

    def pay(self, invoice: str, amount_msat: int | None, max_fee_msat: int) -> Payment:
        """Pay with ``pay``; see :class:`~django_outbox.payments.clients.PaymentClient`."""
        payment_hash = decode_invoice(invoice).payment_hash
        try:
            result = self._call(
                "pay",
                bolt11=invoice,
                amount_msat=amount_msat,
                maxfee=max_fee_msat,
                retry_for=self.retry_for,
            )
        except _Refused as refusal:
            return settle_refusal(self.lookup(payment_hash), refusal.reason)
        if result.get("payment_hash") != payment_hash:
            raise PaymentClientError("Core Lightning answered for another payment hash")
        status = result.get("status")
        if status == "pending":
            raise PaymentPending(f"payment {payment_hash[:16]} is in flight")
        if status == "failed":
            raise PaymentFailed("Core Lightning says it failed", payment_hash=payment_hash)
        if status != "complete":
            raise PaymentClientError("Core Lightning's pay answer has no known status")
        return self._payment(result, "payment_preimage", payment_hash)

    def lookup(self, payment_hash: str) -> PaymentStatus:
        """Ask ``listpays`` about ``payment_hash``: complete wins over pending over failed."""
        payment_hash = check_hash(payment_hash)
        try:
            pays = self._call("listpays", payment_hash=payment_hash).get("pays")
        except _Refused as refusal:
            raise PaymentClientError(f"Core Lightning refused listpays: {refusal.reason}") from None
        if not isinstance(pays, list):
            raise PaymentClientError("Core Lightning's listpays answer has no pays")
        mine = [p for p in pays if isinstance(p, dict) and p.get("payment_hash") == payment_hash]
        for pay in mine:
            if pay.get("status") == "complete":
                payment = self._payment(pay, "preimage", payment_hash)
                return PaymentStatus(PaymentState.COMPLETE, payment_hash, payment)
        if any(pay.get("status") == "pending" for pay in mine):
            return PaymentStatus(PaymentState.PENDING, payment_hash)
        if mine:
            return PaymentStatus(PaymentState.FAILED, payment_hash, reason="failed")
        return PaymentStatus(PaymentState.UNKNOWN, payment_hash)

    @staticmethod
    def _payment(answer: dict[str, Any], key: str, payment_hash: str) -> Payment:
        try:
            preimage = bytes.fromhex(str(answer.get(key, "")))
        except ValueError:
            preimage = b""
        amount = _msat(answer.get("amount_msat"))
        sent = _msat(answer.get("amount_sent_msat"))
        fee = max(0, sent - amount) if amount else 0
        return Payment(verified_preimage(preimage, payment_hash), payment_hash, amount, fee)


class _Refused(PaymentError):
    """Core Lightning answered a call with a JSON-RPC error (``reason``: code and message)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

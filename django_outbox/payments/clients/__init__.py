"""The payment client protocol: how the sender asks a Lightning node to pay and to tell.

A client does two things: :meth:`PaymentClient.pay` an invoice and
:meth:`PaymentClient.lookup` what became of a payment.  Its errors keep apart what the
caller must keep apart (see :mod:`django_outbox.payments.errors`):

* ``pay`` returns a :class:`Payment` only with a preimage that hashes to the payment
  hash (checked here, :func:`verified_preimage`); a wrong one raises
  :class:`~django_outbox.payments.errors.PreimageMismatch` and is never used.
* :class:`~django_outbox.payments.errors.PaymentFailed`: the node says nothing was
  paid and nothing is in flight.  Pay a fresh invoice if you like.
* :class:`~django_outbox.payments.errors.PaymentClientError` (timeout, connection,
  in flight): maybe paid.  Leave the attempt pending, and pay again only once
  ``lookup`` says :attr:`PaymentState.FAILED` or :attr:`PaymentState.UNKNOWN`.

Paying the same invoice twice is safe at the node: LND and Core Lightning both refuse
a second payment of a payment hash that is in flight or settled (LND answers "invoice
is already paid"; the clients then report the first payment).  What they cannot stop
is paying a *new* invoice for the same message, which is why attempts are stored first.

Implementations: :class:`~django_outbox.payments.clients.lnd.LndRestClient`,
:class:`~django_outbox.payments.clients.cln.ClnClient`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from django_outbox.payments.errors import PaymentFailed, PaymentPending, PreimageMismatch

if TYPE_CHECKING:
    from django_outbox.payments.invoices import DecodedInvoice

_HASH_HEX = re.compile(r"[0-9a-f]{64}")


class PaymentState(StrEnum):
    """What a node knows of a payment."""

    COMPLETE = "complete"  # settled: the preimage is known
    PENDING = "pending"  # in flight: do not pay again
    FAILED = "failed"  # failed for good: nothing in flight
    UNKNOWN = "unknown"  # the node never started a payment of that hash


@dataclass(frozen=True)
class Payment:
    """A completed payment.  ``preimage`` (32 bytes) is the proof of payment and, with
    the macaroon, a bearer credential: it never appears in ``repr``."""

    preimage: bytes = field(repr=False)
    payment_hash: str
    amount_msat: int
    fee_msat: int

    @property
    def preimage_hex(self) -> str:
        """The preimage as hex, as the ``Authorization`` header carries it."""
        return self.preimage.hex()


@dataclass(frozen=True)
class PaymentStatus:
    """The answer of :meth:`PaymentClient.lookup`: ``payment`` is set when COMPLETE,
    ``reason`` may say why a payment FAILED."""

    state: PaymentState
    payment_hash: str
    payment: Payment | None = None
    reason: str = ""


@runtime_checkable
class PaymentClient(Protocol):
    """A Lightning node that pays invoices for the sender."""

    def pay(self, invoice: str, amount_msat: int | None, max_fee_msat: int) -> Payment:
        """Pay ``invoice``; ``amount_msat`` only for an amountless invoice (else None);
        at most ``max_fee_msat`` in routing fees.  Blocks until the node answers or the
        client's timeout passes.  An invoice that cannot be decoded raises
        :class:`~django_outbox.payments.errors.InvoiceRefused` before the node is asked."""
        ...

    def lookup(self, payment_hash: str) -> PaymentStatus:
        """What the node knows of the payment of ``payment_hash`` (hex)."""
        ...


@runtime_checkable
class DecodingPaymentClient(PaymentClient, Protocol):
    """A client that also decodes invoices itself (e.g. with the node's own decoder)."""

    def decode(self, invoice: str) -> DecodedInvoice:
        """Decode ``invoice`` (as :func:`~django_outbox.payments.invoices.decode_invoice`)."""
        ...


def decoder_for(client: PaymentClient) -> Callable[[str], DecodedInvoice]:
    """The client's own ``decode`` if it has one, else the package's ``decode_invoice``."""
    if isinstance(client, DecodingPaymentClient):
        return client.decode
    from django_outbox.payments.invoices import decode_invoice

    return decode_invoice


def check_hash(payment_hash: str) -> str:
    """``payment_hash`` in lower case if it is 64 hex digits, else ValueError."""
    lowered = payment_hash.lower()
    if not _HASH_HEX.fullmatch(lowered):
        raise ValueError("a payment hash is 64 hex digits")
    return lowered


def verified_preimage(preimage: bytes, payment_hash: str) -> bytes:
    """``preimage`` if it is 32 bytes whose SHA-256 is ``payment_hash`` (hex), else
    :class:`~django_outbox.payments.errors.PreimageMismatch`."""
    if len(preimage) != 32 or hashlib.sha256(preimage).hexdigest() != payment_hash.lower():
        raise PreimageMismatch(
            f"the node's preimage does not hash to payment hash {payment_hash[:16]}"
        )
    return preimage


def settle_refusal(status: PaymentStatus, reason: str) -> Payment:
    """After the node refused a ``pay`` call with ``reason``, let its record decide.

    A refusal is not always a failure: LND answers "invoice is already paid" for a
    payment that succeeded earlier, and "payment is in transition" for one in flight.
    So: COMPLETE returns the earlier payment, PENDING raises :class:`PaymentPending`,
    FAILED or UNKNOWN (nothing in flight) raise :class:`PaymentFailed`.
    """
    if status.state is PaymentState.COMPLETE and status.payment is not None:
        return status.payment
    if status.state is PaymentState.PENDING:
        raise PaymentPending(f"payment {status.payment_hash[:16]} is in flight ({reason})")
    raise PaymentFailed(reason or status.reason, payment_hash=status.payment_hash)


__all__ = [
    "DecodingPaymentClient",
    "Payment",
    "PaymentClient",
    "PaymentState",
    "PaymentStatus",
    "check_hash",
    "decoder_for",
    "settle_refusal",
    "verified_preimage",
]

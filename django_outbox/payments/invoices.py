"""Decode a BOLT11 invoice and decide whether, and how much, to pay it.

Pure functions: every policy value (network, price cap, rate, minimum, clock) is an
argument, so the worker passes what its settings say and tests pass what they need.

*Network* is the invoice's bech32 currency prefix, as BOLT11 spells it: ``"bc"``
(mainnet), ``"tb"`` (testnet), ``"tbs"`` (signet), ``"bcrt"`` (regtest, invoices
starting ``lnbcrt``).  *Amounts* are millisatoshis.  The defaults follow Bison Relay's
push payments: 100 msat per byte of message, at least 1,000 msat, and an invoice is
treated as expired :data:`EXPIRY_AFFORDANCE` seconds before it really expires, so that
it cannot run out while the payment is on its way.

The reader (:mod:`~django_outbox.payments.bolt11_reader`, which needs ``coincurve``,
the ``payments`` extra) is imported when the first invoice is decoded (a worker imports
it as it starts, when payments are on: :func:`load_decoder`), so this module loads
without it.  Decoding verifies the invoice's signature (recovering or checking the payee
key) and requires a payment hash, a payment secret (LND refuses to pay an invoice
without one) and a description; an amount that is not a whole number of millisatoshis
(``15p``) is refused, as LND and Core Lightning refuse it, so that the amount checked is
the amount a node pays.  A process keeps the last invoices it decoded: the worker
checks an invoice before paying it, and the payment client reads it again to pay.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.payments.challenge import MAX_INVOICE_CHARS, L402Challenge
from django_outbox.payments.errors import ChallengeRefused, InvoiceRefused, Reason
from django_outbox.payments.macaroons import decode_macaroon, l402_identifier
from django_outbox.payments.settings import MAX_MSAT, NETWORKS

#: Seconds before its expiry at which an invoice is no longer paid (Bison Relay: 15 s).
EXPIRY_AFFORDANCE = 15.0
#: Default price of an amountless invoice, per byte of message (Bison Relay: 100 msat).
RATE_MSAT_PER_BYTE = 100
#: Default smallest payment for an amountless invoice (Bison Relay: 1,000 msat).
MINIMUM_MSAT = 1000
#: Longest expiry paid, in seconds: a year (LND makes invoices for a day by default, Core
#: Lightning for a week), past which no date the ledger stores is in doubt.
MAX_EXPIRY = 365 * 86400
#: Seconds an invoice's creation time may be ahead of this clock (the payee's runs fast).
MAX_CLOCK_SKEW = 3600
_HASH_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class DecodedInvoice:
    """What the sender needs from a BOLT11 invoice."""

    invoice: str = field(repr=False)
    network: str
    amount_msat: int | None
    payment_hash: str
    created_at: int
    expiry: int
    payee: str

    @property
    def expires_at(self) -> int:
        """Unix time at which the invoice expires."""
        return self.created_at + self.expiry

    def is_expired(self, now: float | None = None, affordance: float = EXPIRY_AFFORDANCE) -> bool:
        """Whether the invoice expires within ``affordance`` seconds of ``now``."""
        return (time.time() if now is None else now) + affordance >= self.expires_at


@dataclass(frozen=True)
class PaymentTerms:
    """A checked invoice and what to pay for it.

    ``amount_msat`` is what leaves the wallet (before routing fees);
    ``pay_amount_msat`` is what to pass to a client's ``pay``: ``None`` when the
    invoice names its amount (nodes refuse an amount for those), else ``amount_msat``.
    """

    invoice: DecodedInvoice
    amount_msat: int

    @property
    def pay_amount_msat(self) -> int | None:
        """The amount argument for ``PaymentClient.pay``."""
        return None if self.invoice.amount_msat is not None else self.amount_msat


def check_network(network: str) -> str:
    """Return ``network`` if it is a BOLT11 currency prefix, else raise a configuration error."""
    if network not in NETWORKS:
        known = ", ".join(f"{k!r} ({v})" for k, v in NETWORKS.items())
        raise OutboxConfigurationError(f"unknown Lightning network {network!r}; use one of {known}")
    return network


@functools.lru_cache(maxsize=256)
def decode_invoice(invoice: str) -> DecodedInvoice:
    """Decode and verify a BOLT11 invoice; :class:`InvoiceRefused` if it cannot be.

    The answer for each of the last invoices decoded is kept: decoding verifies a
    signature, and the answer depends on the text alone."""
    if len(invoice) > MAX_INVOICE_CHARS:
        raise InvoiceRefused(
            Reason.INVOICE_TOO_LARGE, f"{len(invoice)} characters > {MAX_INVOICE_CHARS}"
        )
    if not (invoice.isascii() and invoice.isalnum()):
        raise InvoiceRefused(Reason.INVOICE_UNDECODABLE, "not bech32 text")
    reader = _reader()
    try:
        decoded = reader.read_invoice(invoice)
    # Hostile input reaches the reader and libsecp256k1: whatever they raise, the
    # invoice cannot be used.
    except Exception as exc:
        raise InvoiceRefused(Reason.INVOICE_UNDECODABLE, _why(exc)) from None
    if decoded.amount_msat is not None and decoded.amount_msat <= 0:
        raise InvoiceRefused(Reason.INVOICE_UNDECODABLE, "amount is not positive")
    return DecodedInvoice(
        invoice=invoice,
        network=decoded.currency,
        amount_msat=decoded.amount_msat,
        payment_hash=decoded.payment_hash,
        created_at=decoded.timestamp,
        expiry=decoded.expiry,
        payee=decoded.payee,
    )


def _why(error: Exception) -> str:
    """What the reader said of an invoice it refused (its own words, bounded), or the
    name of what a library under it raised."""
    if type(error) is ValueError:
        return str(error)[:100]
    return type(error).__name__


def load_decoder() -> None:
    """Import the reader and ``coincurve`` now rather than at the first payment: a worker
    calls it as it starts when payments are on."""
    _reader()


def _reader() -> Any:
    """The BOLT11 reader module, imported on first use: only a site that pays needs
    ``coincurve``."""
    try:
        from django_outbox.payments import bolt11_reader
    except ImportError:
        raise OutboxConfigurationError(
            "paying destinations needs coincurve: pip install 'django-outbox[payments]'"
        ) from None
    return bolt11_reader


def push_amount(
    size: int, *, rate_msat_per_byte: int = RATE_MSAT_PER_BYTE, minimum_msat: int = MINIMUM_MSAT
) -> int:
    """What to pay an amountless invoice for a ``size``-byte message: max(minimum, size x rate)."""
    if size < 0 or rate_msat_per_byte < 0 or minimum_msat < 0:
        raise ValueError("size, rate and minimum cannot be negative")
    return max(minimum_msat, size * rate_msat_per_byte)


def check_bounds(decoded: DecodedInvoice, now: float) -> None:
    """Refuse (:class:`InvoiceRefused`) an invoice holding a value no node would write,
    before anything is computed, stored or turned into a date from it.

    Its payment hash must be 32 bytes of hex; its creation time at most
    :data:`MAX_CLOCK_SKEW` ahead of ``now`` (``invoice_from_the_future``); its expiry at
    most :data:`MAX_EXPIRY` (``expiry_too_long``); its amount, if any, from 1 msat to
    every bitcoin there will be (``amount_out_of_range``).  So an invoice that passes
    expires within a year and an hour of ``now``, and its amount fits the ledger's columns.
    """
    if len(decoded.payment_hash) != 64 or not _HASH_HEX.issuperset(decoded.payment_hash):
        raise InvoiceRefused(Reason.INVOICE_UNDECODABLE, "the payment hash is not 32 bytes")
    if decoded.created_at < 0 or decoded.expiry < 0:
        raise InvoiceRefused(Reason.INVOICE_UNDECODABLE, "a negative time")
    if decoded.created_at > now + MAX_CLOCK_SKEW:
        raise InvoiceRefused(
            Reason.INVOICE_FROM_THE_FUTURE,
            f"created at {decoded.created_at}, now {int(now)} with {MAX_CLOCK_SKEW} s of skew",
        )
    if decoded.expiry > MAX_EXPIRY:
        raise InvoiceRefused(
            Reason.EXPIRY_TOO_LONG, f"expires after {decoded.expiry} s > {MAX_EXPIRY} s"
        )
    amount = decoded.amount_msat
    if amount is not None and not 0 < amount <= MAX_MSAT:
        raise InvoiceRefused(
            Reason.AMOUNT_OUT_OF_RANGE, f"{amount} msat is not between 1 and {MAX_MSAT}"
        )


def check_invoice(
    invoice: str | DecodedInvoice,
    *,
    network: str,
    max_price_msat: int,
    size: int,
    rate_msat_per_byte: int = RATE_MSAT_PER_BYTE,
    minimum_msat: int = MINIMUM_MSAT,
    payment_hash: str | None = None,
    now: float | None = None,
    affordance: float = EXPIRY_AFFORDANCE,
) -> PaymentTerms:
    """Decide whether to pay ``invoice`` for a ``size``-byte message, and how much.

    Refuses (:class:`InvoiceRefused`, ``reason`` saying which) an invoice that cannot be
    decoded, holds a value out of bounds (:func:`check_bounds`), is for another
    ``network``, expires within ``affordance`` seconds, costs more than
    ``max_price_msat`` (an amountless one is priced by :func:`push_amount` first), or
    whose payment hash is not ``payment_hash`` (hex) when given.
    """
    decoded = invoice if isinstance(invoice, DecodedInvoice) else decode_invoice(invoice)
    clock = time.time() if now is None else now
    check_bounds(decoded, clock)
    check_network(network)
    if decoded.network != network:
        raise InvoiceRefused(
            Reason.WRONG_NETWORK, f"invoice is for {decoded.network!r}, we pay on {network!r}"
        )
    if payment_hash is not None and decoded.payment_hash != payment_hash.lower():
        raise InvoiceRefused(
            Reason.HASH_MISMATCH,
            f"invoice hash {decoded.payment_hash[:16]} is not {payment_hash[:16]}",
        )
    if decoded.is_expired(clock, affordance):
        raise InvoiceRefused(
            Reason.INVOICE_EXPIRED,
            f"expires at {decoded.expires_at}, now {int(clock)} with {affordance:g} s to spare",
        )
    if decoded.amount_msat is not None:
        amount = decoded.amount_msat
    else:
        amount = push_amount(size, rate_msat_per_byte=rate_msat_per_byte, minimum_msat=minimum_msat)
    if amount > max_price_msat:
        raise InvoiceRefused(Reason.OVER_PRICE, f"{amount} msat > cap {max_price_msat} msat")
    return PaymentTerms(decoded, amount)


def macaroon_payment_hash(challenge: L402Challenge) -> str:
    """The payment hash (hex) that the challenge's L402 macaroon names."""
    try:
        data = challenge.macaroon_bytes
    except ValueError:
        raise ChallengeRefused(Reason.MACAROON_NOT_BASE64, "the macaroon is not base64") from None
    return l402_identifier(decode_macaroon(data).identifier).payment_hash_hex


def check_challenge(
    challenge: L402Challenge,
    *,
    network: str,
    max_price_msat: int,
    size: int,
    rate_msat_per_byte: int = RATE_MSAT_PER_BYTE,
    minimum_msat: int = MINIMUM_MSAT,
    now: float | None = None,
    affordance: float = EXPIRY_AFFORDANCE,
) -> PaymentTerms:
    """:func:`check_invoice` on the challenge's invoice, which must be the one its
    macaroon names (else ``hash_mismatch``; an unreadable macaroon is ``macaroon_invalid``)."""
    return check_invoice(
        challenge.invoice,
        network=network,
        max_price_msat=max_price_msat,
        size=size,
        rate_msat_per_byte=rate_msat_per_byte,
        minimum_msat=minimum_msat,
        payment_hash=macaroon_payment_hash(challenge),
        now=now,
        affordance=affordance,
    )

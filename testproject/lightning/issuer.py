"""The payee's side of the fake network: signed BOLT11 invoices and L402 challenges.

:class:`InvoiceRegistry` is the shared ledger: every invoice an :class:`InvoiceIssuer`
makes is added with its preimage, and the fake payer node settles it there (which is
how it "learns" the preimage, as a real payment would).  Thread-safe.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from coincurve import PrivateKey

from testproject.lightning import macaroons
from testproject.lightning.bolt11_writer import write_invoice


@dataclass
class IssuedInvoice:
    """One invoice as its payee knows it.  ``paid_msat`` is set once settled."""

    invoice: str = field(repr=False)
    payment_hash: str
    preimage: bytes = field(repr=False)
    amount_msat: int | None
    expires_at: int
    paid_msat: int | None = None


class Unpayable(Exception):
    """The payee refuses the payment: ``reason`` is an LND failure reason name."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InvoiceRegistry:
    """Invoices of a fake network by payment hash; the payer settles them here."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._invoices: dict[str, IssuedInvoice] = {}

    def add(self, issued: IssuedInvoice) -> None:
        """Record a new invoice."""
        with self._lock:
            self._invoices[issued.payment_hash] = issued

    def get(self, payment_hash: str) -> IssuedInvoice | None:
        """The invoice of ``payment_hash``, if this network issued it."""
        with self._lock:
            return self._invoices.get(payment_hash)

    def is_paid(self, payment_hash: str) -> bool:
        """Whether the invoice of ``payment_hash`` was settled."""
        issued = self.get(payment_hash)
        return issued is not None and issued.paid_msat is not None

    def settle(self, payment_hash: str, amount_msat: int) -> bytes:
        """Settle an invoice with ``amount_msat`` and hand out its preimage, as a payee
        does on receiving the HTLC; :class:`Unpayable` if the payee would refuse."""
        with self._lock:
            issued = self._invoices.get(payment_hash)
            if issued is None or issued.paid_msat is not None:
                raise Unpayable("incorrect_payment_details")
            if self.clock() >= issued.expires_at:
                raise Unpayable("incorrect_payment_details")
            if issued.amount_msat is not None and amount_msat < issued.amount_msat:
                raise Unpayable("incorrect_payment_details")
            issued.paid_msat = amount_msat
            return issued.preimage


@dataclass(frozen=True)
class IssuedChallenge:
    """A fresh L402 challenge: ``header`` is the ``WWW-Authenticate`` value."""

    macaroon: str = field(repr=False)
    invoice: IssuedInvoice
    token_id: bytes

    @property
    def header(self) -> str:
        """``L402 macaroon="...", invoice="..."``."""
        return f'L402 macaroon="{self.macaroon}", invoice="{self.invoice.invoice}"'


class InvoiceIssuer:
    """Makes real signed BOLT11 invoices (``lnbcrt...`` on regtest) and L402 macaroons.

    ``node_key`` (32 bytes) signs invoices, ``root_key`` signs macaroons; both random
    unless given.  Every invoice goes into ``registry`` with its preimage.
    """

    def __init__(
        self,
        registry: InvoiceRegistry,
        *,
        network: str = "bcrt",
        node_key: bytes | None = None,
        root_key: bytes | None = None,
        location: str = "django-outbox-test-inbox",
    ) -> None:
        self.registry, self.network, self.location = registry, network, location
        self._node_key = node_key or os.urandom(32)
        self.root_key = root_key or os.urandom(32)

    @property
    def node_id(self) -> str:
        """The payee's public key (hex, compressed), as invoices carry it."""
        return PrivateKey(self._node_key).public_key.format(compressed=True).hex()

    def invoice(
        self,
        amount_msat: int | None = None,
        *,
        expiry: int = 3600,
        created_at: int | None = None,
        description: str = "django_outbox test inbox",
        preimage: bytes | None = None,
    ) -> IssuedInvoice:
        """A new signed invoice; ``amount_msat`` None makes it amountless."""
        preimage = preimage or os.urandom(32)
        payment_hash = hashlib.sha256(preimage).hexdigest()
        date = int(self.registry.clock()) if created_at is None else created_at
        encoded = write_invoice(
            self._node_key,
            network=self.network,
            amount_msat=amount_msat,
            timestamp=date,
            payment_hash=payment_hash,
            payment_secret=os.urandom(32).hex(),
            description=description,
            expiry=expiry,
        )
        issued = IssuedInvoice(encoded, payment_hash, preimage, amount_msat, date + expiry)
        self.registry.add(issued)
        return issued

    def challenge(
        self, amount_msat: int | None = None, *, expiry: int = 3600, created_at: int | None = None
    ) -> IssuedChallenge:
        """A fresh invoice and the L402 macaroon naming it."""
        issued = self.invoice(amount_msat, expiry=expiry, created_at=created_at)
        token_id = os.urandom(32)
        identifier = b"\x00\x00" + bytes.fromhex(issued.payment_hash) + token_id
        raw = macaroons.mint(
            self.root_key,
            identifier,
            location=self.location.encode(),
            caveats=[b"services=inbox:0"],
        )
        return IssuedChallenge(base64.b64encode(raw).decode("ascii"), issued, token_id)

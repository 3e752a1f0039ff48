"""An inbox that charges: 402 with a fresh L402 challenge until the request carries a
valid ``Authorization: L402 <macaroon>:<preimage>``.

:class:`L402Gate` holds the decision and knows nothing of HTTP servers, so any server
can use it: ``status, headers = gate.respond(request_headers)``.  To put a path of any
:class:`~testproject.inbox_servers.InboxServer` behind it, give its ``Behaviour`` the
gate (``Behaviour(gate=gate)``); :class:`L402InboxServer` gates every path.

Valid means: the macaroon decodes, its signature is the gate's (root key of the
issuer), the preimage hashes to the payment hash in its identifier, the registry says
that invoice was paid, and the token was issued by this gate and is unexpired.  Modes:
``per-token`` accepts a paid token until ``token_lifetime`` passes; ``per-message``
accepts each paid token once, so every delivery needs a new payment.
"""

from __future__ import annotations

import hashlib
import http.client
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from django_outbox.payments.challenge import parse_authorization
from django_outbox.payments.errors import PaymentError
from django_outbox.payments.macaroons import decode_macaroon, l402_identifier
from testproject.inbox_servers import Behaviour, InboxServer
from testproject.lightning import macaroons
from testproject.lightning.issuer import InvoiceIssuer, IssuedChallenge


class Mode(StrEnum):
    """How long a paid token opens the inbox."""

    PER_TOKEN = "per-token"
    PER_MESSAGE = "per-message"


@dataclass
class _Token:
    payment_hash: str
    expires_at: float
    uses: int = 0


class L402Gate:
    """Answers 402 with a fresh challenge unless the request's L402 credential is valid.

    ``price_msat`` None issues amountless invoices (the payer picks the amount).
    ``lsat_twin`` sends an ``LSAT`` challenge next to the ``L402`` one, as Aperture does.
    ``repeat_invoice`` answers every ``402`` with one challenge (one invoice, one
    macaroon), paid or not, as a careless or hostile host would.  ``decisions`` records
    ``"challenged"``, ``"accepted"`` or ``"refused: <why>"`` per
    request, in order.
    """

    def __init__(
        self,
        issuer: InvoiceIssuer,
        *,
        mode: Mode | str = Mode.PER_TOKEN,
        price_msat: int | None = 10_000,
        invoice_expiry: int = 3600,
        token_lifetime: float = 3600.0,
        accept_status: int = 202,
        lsat_twin: bool = False,
        repeat_invoice: bool = False,
    ) -> None:
        self.issuer, self.mode = issuer, Mode(mode)
        self.price_msat, self.invoice_expiry = price_msat, invoice_expiry
        self.token_lifetime, self.accept_status = token_lifetime, accept_status
        self.lsat_twin, self.repeat_invoice = lsat_twin, repeat_invoice
        self._repeated: IssuedChallenge | None = None
        self.decisions: list[str] = []
        self._tokens: dict[bytes, _Token] = {}
        self._lock = threading.Lock()

    def respond(
        self, headers: Mapping[str, str] | http.client.HTTPMessage
    ) -> tuple[int, dict[str, str]]:
        """(status, extra headers) for a request with these headers."""
        value = headers.get("Authorization")
        if value:
            why = self._refusal(value)
            if why is None:
                self._decide("accepted")
                return self.accept_status, {}
            self._decide(f"refused: {why}")
        challenge = self._challenge()
        self._decide("challenged")
        header = challenge.header
        if self.lsat_twin:
            header = f"LSAT {header.removeprefix('L402 ')}, {header}"
        return 402, {"WWW-Authenticate": header}

    def _challenge(self) -> IssuedChallenge:
        """A fresh challenge, its token known to the gate (or the one it repeats)."""
        with self._lock:
            if self._repeated is not None:
                return self._repeated
        challenge = self.issuer.challenge(self.price_msat, expiry=self.invoice_expiry)
        clock = self.issuer.registry.clock()
        with self._lock:
            self._tokens[challenge.token_id] = _Token(
                challenge.invoice.payment_hash, clock + self.token_lifetime
            )
            if self.repeat_invoice:
                self._repeated = challenge
        return challenge

    def choose(
        self, behaviour: Behaviour, status: int, headers: http.client.HTTPMessage
    ) -> tuple[Behaviour, int]:
        """What an :class:`InboxServer` path with this gate answers: the path's own
        ``behaviour`` and ``status`` when the request is paid for, else a 402."""
        code, extra = self.respond(headers)
        if code != 402:
            return behaviour, status
        headers_402 = {**behaviour.headers, **extra}
        return Behaviour(statuses=(402,), headers=headers_402, body=b"payment required"), 402

    def _decide(self, decision: str) -> None:
        with self._lock:
            self.decisions.append(decision)

    def _refusal(self, value: str) -> str | None:
        """Why the credential is not valid, or None if it is (and then it is used)."""
        try:
            credentials = parse_authorization(value)
            macaroon = decode_macaroon(credentials.macaroon_bytes)
            identifier = l402_identifier(macaroon.identifier)
        except (PaymentError, ValueError) as exc:
            return f"unreadable credential ({type(exc).__name__})"
        if not macaroons.verify(self.issuer.root_key, macaroon):
            return "macaroon not signed by this inbox"
        if hashlib.sha256(credentials.preimage).digest() != identifier.payment_hash:
            return "preimage does not match the payment hash"
        if not self.issuer.registry.is_paid(identifier.payment_hash_hex):
            return "invoice not paid"
        clock = self.issuer.registry.clock()
        with self._lock:
            token = self._tokens.get(identifier.token_id)
            if token is None or token.payment_hash != identifier.payment_hash_hex:
                return "unknown token"
            if clock >= token.expires_at:
                return "token expired"
            if self.mode is Mode.PER_MESSAGE and token.uses:
                return "token already used"
            token.uses += 1
        return None


class L402InboxServer(InboxServer):
    """An :class:`InboxServer` whose every path is behind ``gate``."""

    def __init__(self, gate: L402Gate, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.gate = gate
        self.default = replace(self.default, gate=gate)

    def behave(self, path: str, behaviour: Behaviour) -> None:
        """As :meth:`InboxServer.behave`, behind the gate."""
        super().behave(path, replace(behaviour, gate=self.gate))

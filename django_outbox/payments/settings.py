"""``OUTBOX_PAYMENTS``: whether, how and how much the worker pays destinations that charge.

Read by :attr:`django_outbox.conf.Settings.PAYMENTS`, checked by the system checks
(``django_outbox.E010`` to ``E014``).  Standard library only, so that reading the
settings never imports ``bolt11``: a site that configures no payments needs no extra.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django_outbox.exceptions import OutboxConfigurationError

#: Bech32 currency prefixes of BOLT11 invoices and the networks they name.
NETWORKS = {"bc": "mainnet", "tb": "testnet", "tbs": "signet", "bcrt": "regtest"}
#: The most millisatoshis any amount may be: every bitcoin there will ever be (21 million).
#: Twice it (a price and a fee) still fits the ``PositiveBigIntegerField`` columns (2**63 - 1).
MAX_MSAT = 21_000_000 * 100_000_000 * 1000

#: The keys of ``OUTBOX_PAYMENTS`` and their defaults (CLIENT has none).
DEFAULTS: dict[str, Any] = {
    "OPTIONS": {},
    "NETWORK": "bc",
    "MAX_PRICE_MSAT": 50_000,
    "DAILY_BUDGET_MSAT": 10_000_000,
    "MAX_FEE_MSAT": 5_000,
    "RATE_MSAT_PER_BYTE": 100,
    "MINIMUM_MSAT": 1_000,
    "EXPIRY_AFFORDANCE": 15.0,
    "TOKEN_LIFETIME": 24 * 3600.0,
    "MAX_PAYMENTS_PER_DELIVERY": 3,
    "HOLD_WHILE_PAYING": 1.0,
    "CLIENT_THREADS": 8,
    "MAX_PARALLEL_PER_HOST": 32,
}
#: Settings that must be positive numbers.
POSITIVE = (
    "MAX_PRICE_MSAT",
    "DAILY_BUDGET_MSAT",
    "RATE_MSAT_PER_BYTE",
    "MINIMUM_MSAT",
    "TOKEN_LIFETIME",
    "MAX_PAYMENTS_PER_DELIVERY",
    "HOLD_WHILE_PAYING",
    "CLIENT_THREADS",
    "MAX_PARALLEL_PER_HOST",
)
#: The most each number may be: amounts within :data:`MAX_MSAT`, times within what a
#: date can carry them to, counts within reason.
LIMITS: dict[str, float] = {
    "MAX_PRICE_MSAT": MAX_MSAT,
    "DAILY_BUDGET_MSAT": MAX_MSAT,
    "MAX_FEE_MSAT": MAX_MSAT,
    "RATE_MSAT_PER_BYTE": MAX_MSAT,
    "MINIMUM_MSAT": MAX_MSAT,
    "EXPIRY_AFFORDANCE": 3600.0,
    "TOKEN_LIFETIME": 366 * 86400.0,
    "MAX_PAYMENTS_PER_DELIVERY": 100,
    "HOLD_WHILE_PAYING": 60.0,
    "CLIENT_THREADS": 256,
    "MAX_PARALLEL_PER_HOST": 256,
}


@dataclass(frozen=True)
class PaymentSettings:
    """``OUTBOX_PAYMENTS``, read and checked.  Amounts in millisatoshis, times in seconds.

    ``client`` is the dotted path (or the class or factory itself) of a
    :class:`~django_outbox.payments.clients.PaymentClient`, called with ``options``
    as keyword arguments; ``options`` may hold secrets and stays out of ``repr``.
    """

    client: str | Callable[..., Any]
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    network: str = DEFAULTS["NETWORK"]
    max_price_msat: int = DEFAULTS["MAX_PRICE_MSAT"]
    daily_budget_msat: int = DEFAULTS["DAILY_BUDGET_MSAT"]
    max_fee_msat: int = DEFAULTS["MAX_FEE_MSAT"]
    rate_msat_per_byte: int = DEFAULTS["RATE_MSAT_PER_BYTE"]
    minimum_msat: int = DEFAULTS["MINIMUM_MSAT"]
    expiry_affordance: float = DEFAULTS["EXPIRY_AFFORDANCE"]
    token_lifetime: float = DEFAULTS["TOKEN_LIFETIME"]
    max_payments_per_delivery: int = DEFAULTS["MAX_PAYMENTS_PER_DELIVERY"]
    hold_while_paying: float = DEFAULTS["HOLD_WHILE_PAYING"]
    client_threads: int = DEFAULTS["CLIENT_THREADS"]
    #: Payments one host that charges per message may have under way at once.
    max_parallel_per_host: int = DEFAULTS["MAX_PARALLEL_PER_HOST"]


def problems(value: Any) -> list[tuple[str, str]]:
    """Every problem of an ``OUTBOX_PAYMENTS`` value, as ``(key, message)``; ``key`` is the
    setting's key (``""`` for the value as a whole).  Empty when it can be used."""
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [("", "OUTBOX_PAYMENTS must be a dict (or None).")]
    found: list[tuple[str, str]] = []
    unknown = set(value) - {"CLIENT", *DEFAULTS}
    if unknown:
        found.append(("", f"OUTBOX_PAYMENTS has unknown keys: {sorted(unknown)}."))
    client = value.get("CLIENT")
    if not (isinstance(client, str) and client) and not callable(client):
        found.append(
            (
                "CLIENT",
                "OUTBOX_PAYMENTS['CLIENT'] must name a payment client class, e.g. "
                "'django_outbox.payments.clients.lnd.LndRestClient'.",
            )
        )
    if not isinstance(value.get("OPTIONS", {}), Mapping):
        found.append(("OPTIONS", "OUTBOX_PAYMENTS['OPTIONS'] must be a dict."))
    network = value.get("NETWORK", DEFAULTS["NETWORK"])
    if network not in NETWORKS:
        known = ", ".join(f"{k!r} ({v})" for k, v in NETWORKS.items())
        found.append(("NETWORK", f"OUTBOX_PAYMENTS['NETWORK'] is {network!r}; use one of {known}."))
    for name, default in DEFAULTS.items():
        if name in ("OPTIONS", "NETWORK"):
            continue
        number = value.get(name, default)
        whole = not isinstance(default, float)
        if isinstance(number, bool) or not isinstance(number, int | float):
            found.append((name, f"OUTBOX_PAYMENTS[{name!r}] must be a number."))
        elif whole and number != int(number):
            found.append((name, f"OUTBOX_PAYMENTS[{name!r}] must be a whole number."))
        elif number < 0 or (name in POSITIVE and number <= 0):
            which = "positive" if name in POSITIVE else "zero or more"
            found.append((name, f"OUTBOX_PAYMENTS[{name!r}] must be {which}."))
        elif number > LIMITS[name]:
            found.append((name, f"OUTBOX_PAYMENTS[{name!r}] must be at most {LIMITS[name]:,.0f}."))
    return found


def read_payments(value: Any) -> PaymentSettings | None:
    """The :class:`PaymentSettings` of an ``OUTBOX_PAYMENTS`` value (None: pay nothing).

    Raises :class:`~django_outbox.exceptions.OutboxConfigurationError` with the first
    of :func:`problems`.
    """
    if value is None:
        return None
    found = problems(value)
    if found:
        raise OutboxConfigurationError(found[0][1])
    numbers: dict[str, Any] = {
        name.lower(): (float if isinstance(default, float) else int)(value.get(name, default))
        for name, default in DEFAULTS.items()
        if name not in ("OPTIONS", "NETWORK")
    }
    return PaymentSettings(
        client=value["CLIENT"],
        options=dict(value.get("OPTIONS", {})),
        network=value.get("NETWORK", DEFAULTS["NETWORK"]),
        **numbers,
    )

"""``OUTBOX_PAYMENTS``: read into typed settings, each mistake named by a system check."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_outbox.checks import check_settings
from django_outbox.conf import conf
from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.payments.clients.lnd import LndRestClient
from django_outbox.payments.settings import PaymentSettings, read_payments

GOOD = {
    "CLIENT": "django_outbox.payments.clients.lnd.LndRestClient",
    "OPTIONS": {"url": "https://127.0.0.1:8080", "macaroon_hex": "ab" * 32},
    "MAX_PRICE_MSAT": 50_000,
    "DAILY_BUDGET_MSAT": 10_000_000,
}


def ids(value: Any) -> set[str]:
    with override_settings(OUTBOX_PAYMENTS=value):
        return {m.id for m in check_settings() if m.id and "E01" in m.id}  # type: ignore[misc]


def test_unset_pays_nothing() -> None:
    assert conf.PAYMENTS is None
    assert ids(None) == set()


def test_the_issues_example_reads_with_the_seeds_defaults() -> None:
    read = read_payments(GOOD)
    assert read == PaymentSettings(
        client=GOOD["CLIENT"], options=GOOD["OPTIONS"], max_price_msat=50_000
    )
    assert (read.rate_msat_per_byte, read.minimum_msat, read.expiry_affordance) == (100, 1000, 15)
    assert read.token_lifetime == 24 * 3600
    assert "ab" * 32 not in repr(read)  # options may hold secrets
    assert ids(GOOD) == set()
    with override_settings(OUTBOX_PAYMENTS=GOOD):
        from django_outbox.payments.paying import payment_client

        assert isinstance(payment_client(conf.PAYMENTS), LndRestClient)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"NETWORK": "litecoin"}, "django_outbox.E011"),
        ({"MAX_PRICE_MSAT": 0}, "django_outbox.E012"),
        ({"DAILY_BUDGET_MSAT": -5}, "django_outbox.E012"),
        ({"RATE_MSAT_PER_BYTE": "100"}, "django_outbox.E012"),
        ({"MAX_FEE_MSAT": 1.5}, "django_outbox.E012"),
        ({"CLIENT": "no.such.Client"}, "django_outbox.E013"),
        ({"CLIENT": None}, "django_outbox.E013"),
        ({"OPTIONS": {"url": "ftp://x"}}, "django_outbox.E013"),
        ({"BUDGET": 5}, "django_outbox.E010"),
        ({"OPTIONS": "url"}, "django_outbox.E010"),
    ],
)
def test_each_mistake_has_its_id(change: dict[str, Any], check: str) -> None:
    value = {**GOOD, **change}
    assert ids(value) == {check}
    if check != "django_outbox.E013" or change == {"CLIENT": None}:  # else: made, not read
        with pytest.raises(OutboxConfigurationError):
            read_payments(value)


def test_a_value_that_is_not_a_dict_is_e010() -> None:
    assert ids(["CLIENT"]) == {"django_outbox.E010"}


def test_payments_without_coincurve_is_e014(monkeypatch: pytest.MonkeyPatch) -> None:
    """The invoices' signatures need the ``payments`` extra; without it, a check says so
    (and a worker's decoder import raises a configuration error, not an ImportError)."""
    import importlib.util
    import sys

    from django_outbox import payments
    from django_outbox.payments import invoices

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "coincurve" else real(name, *a),
    )
    assert ids(GOOD) == {"django_outbox.E014"}
    monkeypatch.setitem(sys.modules, "coincurve", None)
    monkeypatch.delitem(sys.modules, "django_outbox.payments.bolt11_reader", raising=False)
    monkeypatch.delattr(payments, "bolt11_reader", raising=False)
    with pytest.raises(OutboxConfigurationError, match="coincurve"):
        invoices.load_decoder()

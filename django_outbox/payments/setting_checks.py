"""Paid push's system checks, run by :mod:`django_outbox.checks` when ``OUTBOX_PAYMENTS`` is set."""

from __future__ import annotations

import importlib.util

from django.conf import settings
from django.core.checks import CheckMessage, Error

from django_outbox.conf import conf
from django_outbox.payments.paying import payment_client
from django_outbox.payments.settings import DEFAULTS, problems
from django_outbox.payments.settling import payment_seconds


def _check_id(key: str) -> str:
    """The check id of a problem with the ``OUTBOX_PAYMENTS`` key ``key``."""
    if key == "NETWORK":
        return "django_outbox.E011"
    if key == "CLIENT":
        return "django_outbox.E013"
    return "django_outbox.E012" if key in DEFAULTS and key != "OPTIONS" else "django_outbox.E010"


def check_payments() -> list[CheckMessage]:
    """``OUTBOX_PAYMENTS``: its shape (E010), network (E011), numbers (E012), a client
    that can be made (E013), the ``payments`` extra installed (E014), and a lease long
    enough for a payment (E017)."""
    value = getattr(settings, "OUTBOX_PAYMENTS", None)
    found = problems(value)
    errors: list[CheckMessage] = [Error(message, id=_check_id(key)) for key, message in found]
    if value is None or found:
        return errors
    configured = conf.PAYMENTS
    assert configured is not None
    if importlib.util.find_spec("coincurve") is None:
        errors.append(
            Error(
                "OUTBOX_PAYMENTS is set but coincurve (the invoices' signatures) is not installed.",
                hint="pip install 'django-outbox[payments]'",
                id="django_outbox.E014",
            )
        )
    try:
        client = payment_client(configured)
    except Exception as error:  # whatever the client's constructor raises is the finding
        errors.append(
            Error(
                f"OUTBOX_PAYMENTS['CLIENT'] cannot be made: {type(error).__name__}: {error}",
                id="django_outbox.E013",
            )
        )
        return errors
    needed = payment_seconds(client)
    if needed > conf.LEASE_SECONDS:
        errors.append(
            Error(
                f"OUTBOX_LEASE_SECONDS ({conf.LEASE_SECONDS:g} s) cannot cover a payment and "
                f"its request ({needed:g} s: three calls of the payment client's timeout, "
                "two of OUTBOX_TOTAL_TIMEOUT and 10 s).",
                hint="Raise OUTBOX_LEASE_SECONDS or lower the client's timeout: no payment "
                "would ever start.",
                id="django_outbox.E017",
            )
        )
    return errors

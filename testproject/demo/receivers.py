"""Receivers that log every django_outbox signal to :class:`SignalLog`."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from django_outbox.payments.signals import payment_budget_exceeded, payment_failed, payment_made
from django_outbox.signals import (
    delivery_attempted,
    delivery_failed,
    delivery_settled,
    endpoint_disabled,
)
from testproject.demo.models import SignalLog


def _log(name: str, kwargs: dict[str, Any]) -> None:
    SignalLog.objects.create(
        signal=name,
        delivery_id=kwargs["delivery"].pk if kwargs["delivery"] is not None else 0,
        inbox=kwargs.get("inbox") or kwargs.get("destination", ""),
        actor=kwargs["actor"],
        status=kwargs.get("status"),
        error=kwargs.get("error") or kwargs.get("reason", ""),
        tag=kwargs.get("tag", ""),
        outcome=kwargs.get("outcome", ""),
        deadline=kwargs.get("deadline"),
        held=kwargs.get("held"),
        amount_msat=kwargs.get("amount_msat"),
    )


@receiver(delivery_attempted)
def log_attempted(sender: type, **kwargs: Any) -> None:
    """Log an attempt."""
    _log("attempted", kwargs)


@receiver(delivery_settled)
def log_settled(sender: type, **kwargs: Any) -> None:
    """Log a settled delivery."""
    _log("settled", kwargs)


@receiver(delivery_failed)
def log_failed(sender: type, **kwargs: Any) -> None:
    """Log a delivery given up on."""
    _log("failed", kwargs)


@receiver(payment_made)
def log_payment_made(sender: type, **kwargs: Any) -> None:
    """Log a payment the node confirmed."""
    _log("payment_made", kwargs)


@receiver(payment_failed)
def log_payment_failed(sender: type, **kwargs: Any) -> None:
    """Log a payment attempt that failed."""
    _log("payment_failed", kwargs)


@receiver(payment_budget_exceeded)
def log_budget_exceeded(sender: type, **kwargs: Any) -> None:
    """Log a delivery held by the daily budget."""
    _log("budget_exceeded", kwargs)


@receiver(endpoint_disabled)
def log_endpoint_disabled(sender: type, **kwargs: Any) -> None:
    """Log a webhook endpoint disabled after its failure days."""
    SignalLog.objects.create(
        signal="endpoint_disabled",
        delivery_id=0,
        inbox=kwargs["endpoint"],
        actor="",
        status=kwargs["status"],
        error=f"{kwargs['failure_days']} days: {kwargs['error']}",
    )

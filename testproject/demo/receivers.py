"""Receivers that log every django_outbox signal to :class:`SignalLog`."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from django_outbox.signals import delivery_attempted, delivery_failed, delivery_settled
from testproject.demo.models import SignalLog


def _log(name: str, kwargs: dict[str, Any]) -> None:
    SignalLog.objects.create(
        signal=name,
        delivery_id=kwargs["delivery"].pk,
        inbox=kwargs["inbox"],
        actor=kwargs["actor"],
        status=kwargs.get("status"),
        error=kwargs.get("error", ""),
        tag=kwargs.get("tag", ""),
        outcome=kwargs.get("outcome", ""),
        deadline=kwargs.get("deadline"),
        held=kwargs.get("held"),
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

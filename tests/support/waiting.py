"""Polling with a bound: every wait in the tests ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django_outbox.models import Delivery, DeliveryState


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something true, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        time.sleep(every)


def settled(count: int, timeout: float = 60) -> list[Delivery]:
    """Wait until ``count`` deliveries are past queued, sending and waiting; all of them."""
    live = (DeliveryState.QUEUED, DeliveryState.SENDING, DeliveryState.WAITING)
    wait_for(lambda: Delivery.objects.exclude(state__in=live).count() >= count, timeout)
    return list(Delivery.objects.order_by("id"))

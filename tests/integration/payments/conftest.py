"""Fixtures of the paid-push tests: the fake Lightning network and workers paying through it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from django.test import override_settings

from tests.integration.payments.network import Lightning, Start
from tests.support.chaos import Workers


@pytest.fixture
def lightning() -> Iterator[Lightning]:
    """The fake network, its LND listening."""
    network = Lightning()
    yield network
    network.lnd.stop()


@pytest.fixture
def start(chaos_workers: Workers, lightning: Lightning) -> Iterator[Start]:
    """``start(count, **payments)``: workers paying through ``lightning``; this process
    (its sweeper) gets the same ``OUTBOX_PAYMENTS``."""
    with ExitStack() as stack:

        def starting(count: int = 1, **payments: Any) -> list[Any]:
            settings = lightning.settings(**payments)
            # Retries within a second: what is tested is paying once, not the backoff.
            extra = {
                "OUTBOX_PAYMENTS": settings,
                "DEMO_LOG_SIGNALS": True,
                "OUTBOX_RETRY_BASE": 0.2,
                "OUTBOX_RETRY_CAP": 1.0,
            }
            stack.enter_context(override_settings(OUTBOX_PAYMENTS=settings))
            return chaos_workers.start(count, extra, concurrency=1)

        yield starting

"""Polling with a bound: every wait in the tests ends."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


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

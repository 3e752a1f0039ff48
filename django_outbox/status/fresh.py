"""A value read again once it is older than the caller allows: the status readers'
cache, so that scrapes and page loads, however frequent, read the database at most
that often per process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Fresh(Generic[T]):
    """``read()``'s answer, kept and read again by at most one thread at a time."""

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read
        self._kept: tuple[T, float] | None = None
        self._lock = threading.Lock()

    def get(self, ttl: float) -> T:
        """The answer, at most ``ttl`` seconds old."""
        with self._lock:
            if self._kept is not None and time.monotonic() - self._kept[1] < ttl:
                return self._kept[0]
            value = self._read()
            self._kept = (value, time.monotonic())
            return value

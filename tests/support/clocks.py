"""A clock for the tests that move time by hand."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock that a test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

"""Unit tests run without Redis: the suite-wide Redis clean-up does nothing here."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _clean_redis_state() -> None:
    """Overrides tests/conftest.py's fixture of the same name: no Redis to clean."""

"""The ``outbox_capture`` pytest fixture.

Load it from the project's root ``conftest.py`` with
``pytest_plugins = ["django_outbox.testing.pytest_plugin"]``, or import it
into any ``conftest.py``: ``from django_outbox.testing.pytest_plugin import
outbox_capture``.  It is not registered as a ``pytest11`` entry point: the
fixture is for the projects that ask for it, not for every pytest run in an
environment where the package happens to be installed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_outbox.testing.capture import OutboxCapture, captured_sends


@pytest.fixture
def outbox_capture() -> Iterator[OutboxCapture]:
    """The sends committed during the test, none of them published to the broker."""
    with captured_sends() as capture:
        yield capture

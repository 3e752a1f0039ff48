"""For the tests: which of the package's modules a worker process has imported.

Installed only when ``OUTBOX_TEST_MODULES`` names a Redis URL: each settled
delivery adds the names of the loaded ``django_outbox`` modules to a Redis set,
which the extension seam's test reads (with payments off, no paid-push code runs).
"""

from __future__ import annotations

import sys
from typing import Any

from django.apps import AppConfig
from django.conf import settings

#: The Redis set that holds the module names.
KEY = "outbox:test:modules"


def note_modules(sender: type, **kwargs: Any) -> None:
    """Add the loaded ``django_outbox`` modules' names to :data:`KEY`."""
    import redis

    names = [name for name in list(sys.modules) if name.startswith("django_outbox")]
    redis.Redis.from_url(settings.OUTBOX_TEST_MODULES).sadd(KEY, *names)


class LoadedModulesConfig(AppConfig):
    """Connects :func:`note_modules` to ``delivery_settled``."""

    name = "testproject.loaded_modules"
    label = "outbox_test_loaded_modules"

    def ready(self) -> None:
        """Connect the receiver."""
        from django_outbox.signals import delivery_settled

        delivery_settled.connect(note_modules, dispatch_uid="loaded-modules")

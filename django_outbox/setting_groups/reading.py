"""Reading the project's ``OUTBOX_*`` settings, lazily, and forgetting them when they change.

Nothing is read at import time.  What was read is remembered until Django's
``setting_changed`` signal (sent by ``override_settings``) says a setting
changed: a worker reads several settings for every delivery, and asking Django
for one the project does not set raises and catches an ``AttributeError`` each
time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from django_outbox.exceptions import OutboxConfigurationError

MiB = 1 << 20

_UNSET = object()
#: Settings read so far (``_UNSET`` for those the project does not set).
_read: dict[str, Any] = {}
#: Bumped, under the lock, each time a setting changes: a value read before is not kept.
_generation = [0]
_read_lock = threading.Lock()


def read_setting(name: str, default: Any) -> Any:
    """The project's setting ``name``, or ``default`` when it is not set."""
    value = _read.get(name, _UNSET)
    if value is _UNSET and name not in _read:
        generation = _generation[0]
        value = getattr(settings, name, _UNSET)
        with _read_lock:
            if generation == _generation[0]:
                _read[name] = value
    return default if value is _UNSET else value


def _forget(**_: Any) -> None:
    """Forget the settings read so far (a receiver of ``setting_changed``)."""
    with _read_lock:
        _generation[0] += 1
        _read.clear()


setting_changed.connect(_forget, dispatch_uid="django_outbox.conf")


def read_callable(name: str, default: str | None) -> Callable[..., Any] | None:
    """The callable the setting ``name`` gives, or the one its dotted path names."""
    value = read_setting(name, default)
    if value is None or callable(value):
        return value  # type: ignore[no-any-return]
    if not isinstance(value, str):
        raise OutboxConfigurationError(f"{name} must be a dotted path or a callable.")
    try:
        imported = import_string(value)
    except ImportError as error:
        raise OutboxConfigurationError(f"{name}: cannot import {value!r}: {error}") from error
    return imported  # type: ignore[no-any-return]

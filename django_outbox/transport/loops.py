"""The event loops a worker's engine runs on: asyncio's own, or uvloop's.

``OUTBOX_EVENT_LOOP = "uvloop"`` (with ``pip install 'django-outbox[uvloop]'``) gives
the engine's loops libuv's implementation; the transport, the breakers and the signing
code run on either unchanged, since they use only the loop's public interface.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from django_outbox.exceptions import OutboxConfigurationError

#: The names ``OUTBOX_EVENT_LOOP`` takes.
EVENT_LOOPS = ("asyncio", "uvloop")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(name: str) -> LoopFactory:
    """What makes a new event loop of the kind ``name`` (one of :data:`EVENT_LOOPS`).

    Raises :class:`OutboxConfigurationError` for another name, or for ``"uvloop"``
    when the ``uvloop`` extra is not installed.
    """
    if name == "asyncio":
        return asyncio.new_event_loop
    if name != "uvloop":
        raise OutboxConfigurationError(
            f"OUTBOX_EVENT_LOOP must be one of {', '.join(EVENT_LOOPS)}, not {name!r}"
        )
    try:
        import uvloop
    except ImportError:
        raise OutboxConfigurationError(
            "OUTBOX_EVENT_LOOP = 'uvloop' needs uvloop: pip install 'django-outbox[uvloop]'"
        ) from None
    return uvloop.new_event_loop

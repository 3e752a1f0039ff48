"""kombu's filesystem transport for the demo, with messages that appear whole.

kombu's own ``filesystem`` transport creates a message's file and then writes it; a
worker polling the folder in between moves and reads an empty file, and the
``JSONDecodeError`` that follows stops the Celery worker ("Unrecoverable error"). The
demo's sender publishes thousands of messages while the worker reads, so it met this.
Here a message is written under a name no queue reads (``.tmp``) and renamed into
place, which is atomic within one folder: a reader sees no file or the whole file.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    """The filesystem channel, publishing each message by an atomic rename."""

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]  # kombu's two bases disagree
        """Write ``message`` for ``queue`` beside the queue's files, then rename it in."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".tmp"
        try:
            with open(partial, "wb") as file:
                file.write(str_to_bytes(dumps(message)))
            os.replace(partial, final)
        except OSError as error:
            raise ChannelError(f"Cannot add file {final!r} to directory") from error


class Transport(filesystem.Transport):
    """``filesystem://`` with :class:`Channel`: set as Celery's ``broker_transport``."""

    Channel = Channel

"""A private RabbitMQ node that the chaos tests may stop, flush and purge.

The counterpart of :class:`tests.support.chaos_servers.RedisServer` when the tests run on
RabbitMQ (``OUTBOX_BROKER_URL=amqp://...``, the ``pytest-rabbitmq`` step of
``scripts/test``).  ``scripts/services`` starts the node in a folder of its own (so
its own node name, ports and data), the management commands go through
``rabbitmqctl``, and queues are counted and purged over AMQP.  What each fault
means on RabbitMQ:

- :meth:`stop` / :meth:`start`: ``rabbitmqctl stop_app`` / ``start_app``.  The
  listener closes and every connection is cut, as when the broker goes away; the
  node keeps its durable queues and persistent messages, which a Redis without
  persistence would lose.
- :meth:`flush`: the node is SIGKILLed and started again on the same port with
  its data deleted: every queue, binding and message (unacknowledged ones
  included) is gone at once, as with Redis's ``FLUSHALL``; the connections are
  cut too, and the broker is away for the 7-10 s the node takes to start.
  (``rabbitmqctl stop_app`` and ``reset`` would do it more politely, but each
  command takes a second to start, in which loopback workers drain the queues.)
- :meth:`clear`: the queues purged of their ready messages, between tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import amqp
from amqp.exceptions import NotFound

from tests.support.chaos import kill
from tests.support.workers import ROOT

SERVICES = ROOT / "scripts" / "services"


class RabbitServer:
    """A RabbitMQ node of its own in ``directory`` (started by :meth:`start`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.url = ""

    def _services(self, *args: str, timeout: float = 120) -> str:
        env = {**os.environ, "OUTBOX_SERVICES_DIR": str(self.directory)}
        done = subprocess.run(
            [str(SERVICES), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise RuntimeError(f"scripts/services {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def ctl(self, *args: str) -> str:
        """``rabbitmqctl ARGS`` on this node; its output."""
        return self._services("rabbitmqctl", "-q", *args)

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 5672)

    def running(self) -> bool:
        """Whether the node accepts AMQP connections."""
        if not self.url:
            return False
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def start(self) -> RabbitServer:
        """Start the node (about 7 s the first time), or its application after :meth:`stop`."""
        if not self.url:
            exported = self._services("start", "rabbitmq")
            self.url = exported.strip().rsplit("RABBITMQ_URL=", 1)[1]
        elif not self.running():
            self.ctl("start_app")
        deadline = time.monotonic() + 30
        while not self.running():
            if time.monotonic() > deadline:
                raise RuntimeError(f"RabbitMQ does not answer on port {self.port}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Stop the broker (``stop_app``): connections are cut, durable messages kept."""
        self.ctl("stop_app")

    def flush(self) -> None:
        """The broker dies (SIGKILL) and starts again without data, on the same port:
        every queue, message and binding is gone at once, unacknowledged ones too."""
        node = self.directory / "rabbitmq"
        pid = int((node / "rabbitmq.pid").read_text())
        kill([pid])
        shutil.rmtree(node / "mnesia")
        url = self._services("start", "rabbitmq").strip().rsplit("RABBITMQ_URL=", 1)[1]
        assert url == self.url, f"the node came back at {url}, not {self.url}"
        self.start()

    def restart_empty(self) -> None:
        """The node restarted without its data: what :meth:`flush` does here."""
        self.flush()

    def _on_each(self, queues: Iterable[str], action: Callable[[Any, str], int]) -> int:
        """The sum of ``action(channel, queue)`` over the queues that exist."""
        total = 0
        for queue in queues:
            # Each on a connection of its own: a queue that does not exist closes the channel.
            connection = amqp.Connection(f"127.0.0.1:{self.port}", connect_timeout=5)
            connection.connect()
            with contextlib.closing(connection), contextlib.suppress(NotFound):
                total += action(connection.channel(), queue)
        return total

    def queued(self, queues: Iterable[str]) -> int:
        """Messages ready in ``queues`` (not those a worker holds unacknowledged)."""
        return self._on_each(
            queues, lambda channel, queue: channel.queue_declare(queue, passive=True).message_count
        )

    def clear(self, queues: Iterable[str]) -> None:
        """Purge the ready messages of ``queues`` (those that exist)."""
        self._on_each(queues, lambda channel, queue: channel.queue_purge(queue) or 0)

    def reserved(self) -> set[int]:
        """Nothing stays reserved by a lost consumer: RabbitMQ gives its unacknowledged
        messages back to the queue as soon as its connection closes."""
        return set()

    def close(self) -> None:
        """Stop the node and delete its folder."""
        self._services("destroy")
        shutil.rmtree(self.directory, ignore_errors=True)
        self.url = ""

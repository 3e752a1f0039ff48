"""Servers the chaos tests may break: a private Redis, and the test database's PostgreSQL.

:class:`RedisServer` is a ``redis-server`` of the session's own (no persistence) that a
test may flush, stop, restart empty; :func:`restart_postgres` restarts the server of
the test database.  ``tests/support/rabbitmq.py`` has RabbitMQ's counterpart of
:class:`RedisServer`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from django.db import connection

from django_outbox.broker.publish import DELIVER
from tests.support.network import free_port


# -------------------------------------------------------------------- broker ---
class RedisServer:
    """A private ``redis-server`` (no persistence) that tests may flush, stop and restart."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        self.binary = binary
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> RedisServer:
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--maxclients",
                "1000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(Exception):
                if self.client().ping():
                    return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM; nothing is saved)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    # The same faults on either broker (tests/support/rabbitmq.py has RabbitMQ's).
    def running(self) -> bool:
        """Whether the server runs."""
        return self.process is not None and self.process.poll() is None

    def flush(self) -> None:
        """``FLUSHALL``: every message, queued, unacknowledged or waiting, is gone, and
        kombu's ``_kombu.binding.*`` keys with them."""
        self.client().flushall()

    def restart_empty(self) -> None:
        """Stop the server and start it again on the same port without its data (it
        keeps none): what ``flush`` does, and every connection cut as well."""
        self.stop()
        self.start()

    def clear(self, queues: Iterable[str]) -> None:
        """Empty the broker between tests (``FLUSHALL``)."""
        self.flush()

    def queued(self, queues: Iterable[str]) -> int:
        """Messages waiting in ``queues`` (not those a worker took)."""
        client = self.client()
        return sum(int(client.llen(queue)) for queue in queues)

    def reserved(self) -> set[int]:
        """Delivery ids of the ``deliver`` messages consumers took and have not
        acknowledged (kombu's ``unacked`` hash keeps them until the visibility timeout)."""
        ids: set[int] = set()
        for raw in self.client().hvals("unacked"):
            message = json.loads(raw)[0]
            if message.get("headers", {}).get("task") == DELIVER:
                args = json.loads(base64.b64decode(message["body"]))[0]
                ids.update(args[0])
        return ids

    def close(self) -> None:
        """Stop the server at the end of the session."""
        self.stop()


@contextlib.contextmanager
def publishing_to(url: str) -> Iterator[None]:
    """Make this process's Celery app publish to the broker at ``url`` meanwhile."""
    from django_outbox.tasks import deliver

    app = deliver.app
    amqp = app.amqp
    saved = (app.conf.get("broker_write_url"), app._pool, amqp._producer_pool)
    app.conf["broker_write_url"] = url
    app._pool = None
    amqp._producer_pool = None
    try:
        yield
    finally:
        # kombu keeps one pool per broker URL for the whole process: leave it open.
        app.conf["broker_write_url"], app._pool, amqp._producer_pool = saved


# ---------------------------------------------------------------- postgresql ---
def pg_ctl() -> str | None:
    """The newest ``pg_ctl`` binary on this machine."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    return str(found[-1]) if found else shutil.which("pg_ctl")


def restart_postgres() -> float:
    """Restart the test database's server (``pg_ctl restart -m fast``); returns seconds taken.

    The data directory is asked of the server itself; the server runs as
    ``postgres`` when we are root (as ``scripts/services`` starts it).
    """
    with connection.cursor() as cursor:
        cursor.execute("SHOW data_directory")
        data = cursor.fetchone()[0]
    connection.close()
    binary = pg_ctl()
    assert binary, "pg_ctl not found"
    log = Path(data).parent / "pg.log"  # scripts/services keeps its log beside the data
    command = [binary, "-D", data, "-m", "fast", "-w", "-t", "60", "restart"]
    if log.exists():
        command[1:1] = ["-l", str(log)]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    started = time.monotonic()
    subprocess.run(
        command,
        cwd="/",
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=90,
    )
    return time.monotonic() - started

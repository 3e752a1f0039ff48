"""The worker's code run in the test's own process: the deliver task's request, and
waiting for this process's engine and recorder."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django_outbox.models import Lane
from django_outbox.tasks import deliver
from django_outbox.worker.process import this_process


@contextmanager
def running(
    ids: list[int],
    *,
    retries: int = 0,
    queue: str = Lane.DEFAULT,
    headers: dict[str, Any] | None = None,
) -> Iterator[None]:
    """The task's request while a worker runs it with ``ids`` from ``queue``, its
    message carrying ``headers``."""
    deliver.push_request(
        id="deliver-under-test",
        args=[ids],
        kwargs={},
        retries=retries,
        called_directly=False,
        is_eager=True,
        delivery_info={"exchange": "", "routing_key": queue},
        headers=headers,
    )
    try:
        yield
    finally:
        deliver.pop_request()


def settle() -> None:
    """Wait until this process's engine is idle and its recorder has saved everything."""
    assert this_process().engine.wait_idle(10)
    assert this_process().recorder.flush(10)

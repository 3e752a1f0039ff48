"""Small things the tests of django_outbox.testing share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery, current_app
from django.dispatch import Signal

from django_outbox.broker import publish
from testproject.demo.keys import ACTOR

ACTIVITY: dict[str, Any] = {
    "@context": "https://www.w3.org/ns/activitystreams",
    "id": "https://demo.example/activities/1",
    "type": "Create",
    "actor": ACTOR,
    "object": {"type": "Note", "content": "hello"},
}


@contextmanager
def receiving(signal: Signal) -> Iterator[list[dict[str, Any]]]:
    """The keyword arguments of each sending of ``signal`` while the block runs."""
    received: list[dict[str, Any]] = []

    def receiver(sender: type, **kwargs: Any) -> None:
        kwargs.pop("signal")
        received.append(kwargs)

    signal.connect(receiver, weak=False)
    try:
        yield received
    finally:
        signal.disconnect(receiver)


@contextmanager
def unreachable_broker() -> Iterator[Celery]:
    """Make the current Celery app one whose broker is a port where nothing listens.

    Publishing to it fails at once (no retries), and ``dispatch`` logs a warning.
    The app is also the one ``dispatch`` publishes with, in place of the recording
    broker the unit tests' conftest puts there.
    """
    app = Celery("unreachable", broker="redis://127.0.0.1:1/0", set_as_current=False)
    app.conf.broker_connection_retry = False
    app.conf.task_publish_retry = False
    app.conf.broker_transport_options = {"max_retries": 0}
    previous = current_app._get_current_object()
    recording = publish.current_app
    app.set_current()
    publish.current_app = app
    try:
        yield app
    finally:
        publish.current_app = recording
        previous.set_current()
        app.close()

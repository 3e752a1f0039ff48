"""The recovery pass's own broker connection times out its socket calls, whatever the
project set for its own: a broker that stops answering fails a step, not the pass."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import pytest

from django_outbox.broker import publish


class App:
    """A Celery app that notes how its write connection was asked for."""

    def __init__(self, url: str) -> None:
        self.conf = {"broker_write_url": None, "broker_url": url}
        self.asked: dict[str, Any] = {}

    @contextmanager
    def connection_for_write(self, **options: Any) -> Any:
        self.asked = options

        class Connection:
            def ensure_connection(self, max_retries: int) -> None:
                assert max_retries == 1

        yield Connection()


class Conf(dict[str, Any]):
    def __getattr__(self, name: str) -> Any:
        return self[name]


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("redis://127.0.0.1:6379/0", {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}),
        ("amqp://guest@127.0.0.1//", {"read_timeout": 5.0, "write_timeout": 5.0}),
    ],
)
def test_socket_calls_are_bounded_on_each_broker(
    monkeypatch: pytest.MonkeyPatch, url: str, options: dict[str, float]
) -> None:
    app = App(url)
    app.conf = Conf(app.conf)
    monkeypatch.setattr(publish, "current_app", app)
    with publish._fresh_connection():
        pass
    assert app.asked == {"connect_timeout": 5.0, "transport_options": options}

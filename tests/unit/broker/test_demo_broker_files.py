"""The demo's filesystem broker: a message is never seen half written (testproject.broker_files)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection

from testproject.broker_files import Transport


@pytest.fixture
def channel(tmp_path: Path) -> Iterator[Any]:
    folders = {name: tmp_path / name for name in ("in", "processed", "control")}
    for folder in folders.values():
        folder.mkdir()
    options = {
        "data_folder_in": str(folders["in"]),
        "data_folder_out": str(folders["in"]),
        "processed_folder": str(folders["processed"]),
        "control_folder": str(folders["control"]),
        "store_processed": False,
    }
    with Connection("filesystem://", transport=Transport, transport_options=options) as conn:
        yield conn.default_channel


def test_a_reader_sees_no_message_until_it_is_whole(
    channel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the message is being written, a poll of the queue finds nothing (kombu's own
    transport lets it take the empty file, and the worker dies on its JSON)."""
    seen_while_writing: list[object] = []
    rename = os.replace

    def replace_after_a_poll(source: str, target: str) -> None:
        assert os.path.getsize(source) > 0
        try:
            seen_while_writing.append(channel._get("outbox.priority"))
        except Empty:
            seen_while_writing.append(None)
        rename(source, target)

    monkeypatch.setattr(os, "replace", replace_after_a_poll)
    channel._put("outbox.priority", {"body": "x" * 10_000})
    assert seen_while_writing == [None]
    assert channel._size("outbox.priority") == 1
    assert channel._get("outbox.priority") == {"body": "x" * 10_000}
    assert os.listdir(channel.data_folder_in) == []


def test_each_message_reaches_its_queue_once(channel: Any) -> None:
    for n in range(3):
        channel._put("outbox", {"n": n})
    channel._put("outbox.priority", {"n": "urgent"})
    assert channel._size("outbox") == 3
    assert sorted(channel._get("outbox")["n"] for _ in range(3)) == [0, 1, 2]
    assert channel._get("outbox.priority") == {"n": "urgent"}
    with pytest.raises(Empty):
        channel._get("outbox")

"""The header every message carries, and reading kombu's Redis lists of a queue."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from django.test import override_settings

from django_outbox.broker.backlog import HEADER, Sent, header, list_names, oldest_sent, read_sent
from django_outbox.broker.publish import DELIVER, EXPAND, publish, start_expansion
from django_outbox.models import Lane
from tests.support.broker import RecordingApp

AT = 1_800_000_000.25


def test_a_header_reads_back_as_written() -> None:
    assert read_sent(header(42, AT)) == Sent(datetime.fromtimestamp(AT, tz=UTC), 42)
    assert read_sent(header(None, AT)) == Sent(datetime.fromtimestamp(AT, tz=UTC), None)


@pytest.mark.parametrize(
    "headers",
    [
        None,
        [],
        {},
        {"task": "django_outbox.deliver"},
        {HEADER: "1800000000, 1"},
        {HEADER: [AT]},
        {HEADER: [AT, 1, 2]},
        {HEADER: [True, 1]},
        {HEADER: [float("nan"), 1]},
        {HEADER: [1e300, 1]},
        {HEADER: [-AT, 1]},
        {HEADER: [AT, "1"]},
        {HEADER: [AT, False]},
        {HEADER: [AT, 1.5]},
    ],
)
def test_a_header_that_is_not_the_package_s_or_out_of_range_says_nothing(headers: object) -> None:
    assert read_sent(headers) is None


def test_the_redis_lists_of_a_queue_are_kombu_s_one_per_priority_step() -> None:
    sep = "\x06\x16"
    assert list_names("outbox", [0, 3, 6, 9], sep) == [
        "outbox",
        f"outbox{sep}3",
        f"outbox{sep}6",
        f"outbox{sep}9",
    ]
    assert list_names("outbox.low", [0, 5, 5], "|") == ["outbox.low", "outbox.low|5"]


def _raw(headers: dict[str, object]) -> bytes:
    return json.dumps({"body": "", "headers": headers, "properties": {}}).encode()


def test_the_oldest_of_the_package_s_messages_is_read_from_the_old_end() -> None:
    newest, older = _raw(header(9, AT + 1)), _raw(header(5, AT))
    foreign = _raw({"task": "django_outbox.sweep"})
    # Redis order: newest first; the last element is the next to be consumed.
    assert oldest_sent([newest, older, foreign, b"not json"]) == read_sent(header(5, AT))
    assert oldest_sent([foreign, b"[1, 2]"]) is None
    assert oldest_sent([]) is None


def test_a_dispatch_publishes_each_lane_in_ascending_order_with_the_header(
    broker: RecordingApp,
) -> None:
    before = time.time()
    with override_settings(OUTBOX_CHUNK_SIZE=2):
        assert publish({Lane.DEFAULT: [7, 3, 9, 1, 5], Lane.PRIORITY: [4]})
    after = time.time()

    assert [(m.queue, m.args[0]) for m in broker.sent] == [
        (Lane.DEFAULT, [1, 3]),
        (Lane.DEFAULT, [5, 7]),
        (Lane.DEFAULT, [9]),
        (Lane.PRIORITY, [4]),
    ]
    sent = [read_sent(m.headers) for m in broker.sent]
    assert [s.first for s in sent if s is not None] == [1, 5, 9, 4]
    assert all(s is not None and before <= s.at.timestamp() <= after for s in sent)
    assert {m.name for m in broker.sent} == {DELIVER}


def test_an_expansion_carries_the_header_without_a_first_delivery(broker: RecordingApp) -> None:
    assert start_expansion(12, Lane.DEFAULT)
    (sent,) = broker.sent
    assert sent.name == EXPAND
    found = read_sent(sent.headers)
    assert found is not None and found.first is None

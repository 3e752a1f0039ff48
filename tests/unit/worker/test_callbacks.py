"""The application's functions, called concurrently and bounded in time."""

from __future__ import annotations

import threading
import time

import pytest
from django.test import override_settings

from django_outbox.worker.callbacks import CallbackTimedOut, Remembered, call_each


def test_answers_and_exceptions_come_back_by_key() -> None:
    def resolve(sender: str) -> str:
        if sender == "gone":
            raise LookupError("purged")
        return sender.upper()

    found = call_each(resolve, [("a", ("a",)), ("gone", ("gone",)), ("a", ("a",))], "RESOLVER")
    assert found["a"] == "A"
    assert isinstance(found["gone"], LookupError)


@override_settings(OUTBOX_STALL_TIMEOUT=0.4)
def test_calls_that_hang_share_one_deadline_and_time_out() -> None:
    release = threading.Event()

    def resolve(sender: str) -> str:
        if sender.startswith("slow"):
            release.wait(5)
        return sender

    started = time.monotonic()
    try:
        found = call_each(resolve, [(s, (s,)) for s in ("slow1", "slow2", "fast")], "RESOLVER")
    finally:
        release.set()
    assert time.monotonic() - started < 1.5  # one deadline (0.2 s), not one per call
    assert found["fast"] == "fast"
    for sender in ("slow1", "slow2"):
        error = found[sender]
        assert isinstance(error, CallbackTimedOut)
        assert str(error) == "RESOLVER did not answer within 0.2 s"


def test_remembered_answers_are_kept_and_exceptions_asked_again() -> None:
    asked: list[str] = []

    def resolve(sender: str) -> str:
        asked.append(sender)
        if sender == "flaky" and asked.count("flaky") == 1:
            raise RuntimeError("once")
        return sender

    kept: Remembered[str, str] = Remembered("RESOLVER", resolve, ttl=60)
    assert kept.one("a", "a") == "a"
    assert kept.one("a", "a") == "a"
    with pytest.raises(RuntimeError, match="once"):
        kept.one("flaky", "flaky")
    assert kept.answers({"flaky": ("flaky",), "a": ("a",)}) == {"flaky": "flaky", "a": "a"}
    assert asked == ["a", "flaky", "flaky"]

"""A claim's origins are read from the shared scheme cache at once, before sending; what a
process learnt is written back in one round trip per batch of outcomes."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import caches

from django_outbox.conf import conf
from django_outbox.signing import Scheme
from django_outbox.signing.schemes import recall, remembered_here, share, share_learnt


def test_recall_copies_what_the_cache_knows_and_what_it_does_not_in_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    share("https://a.example", Scheme.RFC9421)
    share_learnt()
    cache = caches[conf.SCHEME_CACHE]
    reads: list[list[str]] = []
    get_many = cache.get_many

    def counted(keys: Any) -> Any:
        reads.append(sorted(keys))
        return get_many(keys)

    monkeypatch.setattr(cache, "get_many", counted)
    recall(["https://a.example", "https://b.example"])
    assert len(reads) == 1
    assert remembered_here("https://a.example") == (True, Scheme.RFC9421)
    assert remembered_here("https://b.example") == (True, None), "known to be unknown"
    recall(["https://a.example", "https://b.example"])
    assert len(reads) == 1, "what this process knows is not read again"


def test_a_cache_that_fails_leaves_each_delivery_to_ask_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(keys: Any) -> Any:
        raise ConnectionError("cache down")

    monkeypatch.setattr(caches[conf.SCHEME_CACHE], "get_many", broken)
    recall(["https://a.example"])
    assert remembered_here("https://a.example") == (False, None)


def test_what_a_process_learnt_is_told_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = caches[conf.SCHEME_CACHE]
    writes: list[dict[str, Any]] = []
    set_many = cache.set_many

    def counted(values: dict[str, Any], timeout: Any = None) -> Any:
        writes.append(dict(values))
        return set_many(values, timeout)

    monkeypatch.setattr(cache, "set_many", counted)
    share("https://a.example", Scheme.RFC9421)
    share("https://b.example", Scheme.CAVAGE)
    share("https://a.example", Scheme.CAVAGE)  # the later answer wins
    assert writes == [], "nothing is written until the batch is told"
    assert share_learnt() == 2
    assert writes == [
        {
            "django_outbox:scheme:https://a.example": Scheme.CAVAGE.value,
            "django_outbox:scheme:https://b.example": Scheme.CAVAGE.value,
        }
    ]
    assert cache.get("django_outbox:scheme:https://b.example") == Scheme.CAVAGE.value
    assert share_learnt() == 0
    assert len(writes) == 1, "an empty batch writes nothing"


def test_a_cache_that_fails_to_hear_is_logged_and_the_batch_dropped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(values: Any, timeout: Any = None) -> Any:
        raise ConnectionError("cache down")

    monkeypatch.setattr(caches[conf.SCHEME_CACHE], "set_many", broken)
    share("https://a.example", Scheme.RFC9421)
    assert share_learnt() == 0
    assert "could not tell the cache the schemes of 1 origins" in caplog.text
    monkeypatch.undo()
    assert share_learnt() == 0, "dropped: the origin is learnt again by a double knock"

"""A claim's origins are read from the shared scheme cache at once, before sending."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import caches

from django_outbox.conf import conf
from django_outbox.signing import Scheme
from django_outbox.signing.schemes import recall, remembered_here, share


def test_recall_copies_what_the_cache_knows_and_what_it_does_not_in_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    share("https://a.example", Scheme.RFC9421)
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

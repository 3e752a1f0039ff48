"""Settings are remembered once read, and forgotten when Django says one changed."""

from __future__ import annotations

from typing import Any
from unittest import mock

from django.conf import settings
from django.test import override_settings

from django_outbox.conf import conf


def test_a_setting_read_once_is_not_asked_for_again() -> None:
    assert conf.PER_HOST == conf.PER_HOST
    asked: list[str] = []
    real = type(settings).__getattr__

    def spy(self: Any, name: str) -> Any:
        asked.append(name)
        return real(self, name)

    with mock.patch.object(type(settings), "__getattr__", spy):
        conf.PER_HOST  # noqa: B018
        conf.BREAKER_SCOPE  # noqa: B018
    assert "OUTBOX_PER_HOST" not in asked


def test_override_settings_is_seen_at_once_and_undone() -> None:
    before = conf.PER_HOST
    with override_settings(OUTBOX_PER_HOST=before + 3):
        assert before + 3 == conf.PER_HOST
    assert before == conf.PER_HOST


def test_a_setting_the_project_does_not_set_gives_its_default_until_set() -> None:
    assert not hasattr(settings, "OUTBOX_BREAKER_SCOPE")
    assert conf.BREAKER_SCOPE == "host"
    with override_settings(OUTBOX_BREAKER_SCOPE="inbox"):
        assert conf.BREAKER_SCOPE == "inbox"
    assert conf.BREAKER_SCOPE == "host"

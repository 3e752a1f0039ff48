"""System checks: each misconfiguration gives exactly the messages it should, by id."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_outbox.checks import check_settings

REDIS_CACHE = {
    "BACKEND": "django_redis.cache.RedisCache",
    "LOCATION": "redis://127.0.0.1:1/0",
    "OPTIONS": {"SOCKET_TIMEOUT": 5},
}
#: A Redis cache whose calls may block for ever (W006).
UNBOUNDED_REDIS = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
LOCAL_CACHE = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
SQLITE = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",
        "OPTIONS": {"transaction_mode": "IMMEDIATE"},
    }
}
DEFERRED_SQLITE = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
POSTGRES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "outbox"}}


def ids(**settings: Any) -> list[str]:
    """The ids of what the checks say with ``settings``, in the order they say it.

    ``DEBUG`` is on unless given, as in the test project (pytest-django turns it off).
    """
    with override_settings(**{"DEBUG": True, **settings}):
        return [message.id for message in check_settings()]  # type: ignore[misc]


def outbox_ids(*codes: str) -> list[str]:
    return [f"django_outbox.{code}" for code in codes]


def test_the_test_project_is_clean() -> None:
    assert ids() == []


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"OUTBOX_KEY_RESOLVER": None, "OUTBOX_WEBHOOK_SECRET_RESOLVER": None}, ["E001"]),
        ({"OUTBOX_KEY_RESOLVER": "no.such.module.resolve"}, ["E001"]),
        ({"OUTBOX_KEY_RESOLVER": 42}, ["E001"]),
        # A project that sends only webhooks, or only activities, sets one resolver.
        ({"OUTBOX_KEY_RESOLVER": None}, []),
        ({"OUTBOX_WEBHOOK_SECRET_RESOLVER": None}, []),
        ({"OUTBOX_WEBHOOK_SECRET_RESOLVER": "no.such.module.secrets"}, ["E007"]),
        ({"OUTBOX_WEBHOOK_SECRET_RESOLVER": 42}, ["E007"]),
        ({"OUTBOX_LOCAL_HOSTS": "demo.example"}, ["E008"]),
        ({"OUTBOX_LOCAL_HOSTS": [""]}, ["E008"]),
        ({"OUTBOX_LOCAL_HOSTS": [None]}, ["E008"]),
        ({"OUTBOX_LOCAL_HOSTS": 7}, ["E008"]),
        ({"OUTBOX_LOCAL_HOSTS": {"a.example", "b.example"}}, []),
        ({"OUTBOX_FIRST_SCHEME": "hs2019"}, ["E002"]),
        ({"OUTBOX_BREAKER_SCOPE": "planet"}, ["E003"]),
        ({"OUTBOX_ALLOWED_NETWORKS": ["10.0.0.0/33"]}, ["E004"]),
        ({"OUTBOX_ALLOWED_NETWORKS": ["127.0.0.0/8", "nonsense"]}, ["E004"]),
        ({"OUTBOX_BREAKER_CACHE": "nope"}, ["E005"]),
        ({"OUTBOX_BREAKER_CACHE": "default", "CACHES": {"default": LOCAL_CACHE}}, ["E005"]),
        ({"OUTBOX_PER_HOST": 0}, ["E006"]),
        ({"OUTBOX_CHUNK_SIZE": -5}, ["E006"]),
        ({"OUTBOX_MAX_BODY_BYTES": "lots"}, ["E006"]),
        ({"OUTBOX_BREAKER_COOL_OFF": 0}, ["E006"]),
        ({"OUTBOX_TOTAL_TIMEOUT": 0}, ["E006"]),
        ({"OUTBOX_MAX_INBOXES": 0}, ["E006"]),
        ({"OUTBOX_MAX_ATTEMPTS": 40_000}, ["E015"]),
        ({"OUTBOX_HOST_RATE": 0}, ["E020"]),
        ({"OUTBOX_HOST_RATE": "fast"}, ["E020"]),
        ({"OUTBOX_HOST_RATES": {"a.example": -2}}, ["E020"]),
        ({"OUTBOX_HOST_RATES": ["a.example"]}, ["E020"]),
        ({"OUTBOX_RATE_FLOOR": 0}, ["E020"]),
        ({"OUTBOX_SLOW_START_SECONDS": -1}, ["E020"]),
        ({"OUTBOX_HOST_RATE": 5, "OUTBOX_HOST_RATES": {"a.example": None}}, []),
        # The in-flight maximum defaults to four times the concurrency: both are wrong.
        ({"OUTBOX_CONCURRENCY": 0}, ["E006", "E006"]),
        # A lease of nothing is shorter than two requests, too.
        ({"OUTBOX_LEASE_SECONDS": 0}, ["E006", "W003"]),
        ({"OUTBOX_LEASE_SECONDS": 30, "OUTBOX_TOTAL_TIMEOUT": 30}, ["W003"]),
        ({"OUTBOX_LEASE_SECONDS": 70, "OUTBOX_TOTAL_TIMEOUT": 30}, []),
        ({"OUTBOX_HEARTBEAT_INTERVAL": 0}, ["E006"]),
        ({"OUTBOX_HEARTBEAT_TIMEOUT": -1}, ["E006", "E016"]),
        ({"OUTBOX_HEARTBEAT_INTERVAL": 6, "OUTBOX_HEARTBEAT_TIMEOUT": 15}, ["E016"]),
        ({"OUTBOX_HEARTBEAT_INTERVAL": 5, "OUTBOX_HEARTBEAT_TIMEOUT": 15}, []),
        (
            {
                "OUTBOX_KEY_RESOLVER": None,
                "OUTBOX_WEBHOOK_SECRET_RESOLVER": None,
                "OUTBOX_FIRST_SCHEME": "hs2019",
            },
            ["E001", "E002"],
        ),
    ],
    ids=lambda value: (
        "gives " + ",".join(value or ["nothing"])
        if isinstance(value, list)
        else ",".join(f"{name}={setting!r}" for name, setting in value.items())
    ),
)
def test_each_mistake_gives_exactly_its_ids(settings: dict[str, Any], expected: list[str]) -> None:
    assert ids(**settings) == outbox_ids(*expected)


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # Breakers in each process's memory, on PostgreSQL.
        ({"DATABASES": POSTGRES, "OUTBOX_BREAKER_CACHE": None}, ["W001"]),
        # Breakers shared in Redis, on SQLite.
        (
            {
                "DATABASES": SQLITE,
                "CACHES": {"default": LOCAL_CACHE, "breakers": REDIS_CACHE},
                "OUTBOX_BREAKER_CACHE": "breakers",
            },
            ["W002"],
        ),
        ({"DATABASES": SQLITE, "OUTBOX_BREAKER_CACHE": None}, ["W001", "W002"]),
        # What production should look like.
        (
            {
                "DATABASES": POSTGRES,
                "CACHES": {"default": REDIS_CACHE},
                "OUTBOX_BREAKER_CACHE": "default",
            },
            [],
        ),
        (
            {
                "DATABASES": POSTGRES,
                "CACHES": {"default": REDIS_CACHE, "breakers": UNBOUNDED_REDIS},
                "OUTBOX_BREAKER_CACHE": "breakers",
            },
            ["W006"],
        ),
    ],
    ids=["memory breakers", "sqlite", "both", "production", "no socket timeout"],
)
def test_production_warnings(settings: dict[str, Any], expected: list[str]) -> None:
    assert ids(DEBUG=False, **settings) == outbox_ids(*expected)


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_with_debug_on_neither_production_warning_is_given() -> None:
    assert ids(DEBUG=True, DATABASES=SQLITE, OUTBOX_BREAKER_CACHE=None) == []


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
def test_sqlite_without_immediate_transactions_is_warned_of(debug: bool) -> None:
    found = ids(DEBUG=debug, DATABASES=DEFERRED_SQLITE, OUTBOX_BREAKER_CACHE="default")
    assert "django_outbox.W005" in found
    assert "django_outbox.W005" not in ids(DEBUG=debug, DATABASES=SQLITE)

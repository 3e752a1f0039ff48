"""System checks name each misconfiguration with a stable id."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_outbox.checks import check_settings


def ids(**settings: object) -> set[str]:
    with override_settings(**settings):
        return {message.id for message in check_settings()}  # type: ignore[misc]


def test_the_test_project_is_clean() -> None:
    assert ids(DEBUG=True) == set()


def test_each_mistake_has_its_id() -> None:
    assert "django_outbox.E001" in ids(
        OUTBOX_KEY_RESOLVER=None, OUTBOX_WEBHOOK_SECRET_RESOLVER=None
    )
    assert "django_outbox.E001" in ids(OUTBOX_KEY_RESOLVER="no.such.module.resolve")
    assert "django_outbox.E002" in ids(OUTBOX_FIRST_SCHEME="hs2019")
    assert "django_outbox.E003" in ids(OUTBOX_BREAKER_SCOPE="planet")
    assert "django_outbox.E004" in ids(OUTBOX_ALLOWED_NETWORKS=["10.0.0.0/33"])
    assert "django_outbox.E005" in ids(OUTBOX_BREAKER_CACHE="nope")
    assert "django_outbox.E006" in ids(OUTBOX_PER_HOST=0)


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_production_warnings() -> None:
    assert "django_outbox.W001" in ids(DEBUG=False, OUTBOX_BREAKER_CACHE=None)
    assert "django_outbox.W002" in ids(
        DEBUG=False, DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3"}}
    )


def test_a_lease_shorter_than_two_slow_requests_is_warned_about() -> None:
    assert "django_outbox.W003" in ids(OUTBOX_LEASE_SECONDS=30, OUTBOX_TOTAL_TIMEOUT=30)

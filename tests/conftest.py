"""What unit and integration tests share: loopback inboxes, a test CA, the database switch.

``tests/unit`` needs no server: run it with no ``REDIS_URL`` and no
``DATABASE_URL`` (SQLite under ``OUTBOX_RUN_DIR``, in-memory caches).
``tests/integration`` needs ``REDIS_URL`` (its conftest refuses to run
without) and runs on PostgreSQL when ``DATABASE_URL`` is set, else on SQLite.
``scripts/test`` runs both.  Helpers live in ``tests/support``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.workers import postgres

# The fixture the package ships for applications' tests
# (tests/unit/testing/test_testing.py uses it).
pytest_plugins = ["django_outbox.testing.pytest_plugin"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Unit tests first: a worker process an integration test started may still run, and
    # its recovery pass would publish and send the rows a unit test writes.
    items.sort(key=lambda item: "integration" in item.path.parts)
    if not postgres():
        skip = pytest.mark.skip(reason="PostgreSQL only; this run is on SQLite")
        for item in items:
            if "postgres_only" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _payment_admin_pages() -> None:
    """The payment attempts' admin pages, as a project with ``OUTBOX_PAYMENTS`` set has
    them (the admin registers an extension's pages only when it is on; the tests turn
    payments on per test, after the URLs are made, and the admin tests walk every page)."""
    from django.contrib import admin
    from django.urls import clear_url_caches

    from django_outbox.payments.extension import PAID_PUSH
    from django_outbox.payments.models import PaymentAttempt

    if not admin.site.is_registered(PaymentAttempt):
        PAID_PUSH.register_admin(admin.site)
    clear_url_caches()


@pytest.fixture(autouse=True)
def _forget_remembered_schemes() -> None:
    """Each test starts with no signing scheme remembered, in this process or in a
    Redis cache (which outlives a test session when its server is kept running)."""
    from django.core.cache import caches

    from django_outbox.conf import conf
    from django_outbox.signing.schemes import forget_local

    forget_local()
    shared = caches[conf.SCHEME_CACHE]
    if hasattr(shared, "delete_pattern"):  # django-redis
        shared.delete_pattern("django_outbox:scheme:*")


@pytest.fixture(scope="module")
def ca() -> Any:
    """A throwaway certificate authority for TLS inbox servers."""
    import trustme

    return trustme.CA()


@pytest.fixture
def ca_file(ca: Any, tmp_path: Path) -> str:
    """The CA's certificate in a PEM file, as ``OUTBOX_CA_BUNDLE`` takes it."""
    path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def inbox_server() -> Iterator[Any]:
    """A loopback inbox server that records every request."""
    from testproject.inbox_servers import InboxServer

    with InboxServer() as server:
        yield server

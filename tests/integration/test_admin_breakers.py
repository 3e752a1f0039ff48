"""The admin lists and resets the breakers every worker shares, in Redis."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from django_outbox.breakers import BreakerPolicy
from django_outbox.breakers.configured import configured_store
from django_outbox.breakers.redis_store import RedisBreakerStore

pytestmark = pytest.mark.redis_state


@pytest.mark.django_db
def test_a_breaker_opened_by_another_process_is_listed_and_reset(admin_client: Client) -> None:
    # Another store object, as a worker process would have: only Redis is shared.
    store = configured_store()
    assert isinstance(store, RedisBreakerStore)
    policy = BreakerPolicy(threshold=1, cool_off=60)
    store.record("host:dead.example", policy, failed=True, admission=None)
    url = reverse("admin:django_outbox_breakers")
    assert b"host:dead.example" in admin_client.get(url).content
    admin_client.post(url, {"key": "host:dead.example"})
    assert store.admit("host:dead.example", policy).kind == "pass"
    assert b"No breaker is open" in admin_client.get(url).content

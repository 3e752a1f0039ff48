"""Pruning's one-statement batch on PostgreSQL: what it deletes and unlinks, and when
Django's collector does it instead."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import pre_delete
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_outbox.models import Attempt, Delivery, DeliveryState
from django_outbox.payments.models import PaymentAttempt
from django_outbox.store.pruning import one_statement, prune
from tests.support.rows import ago, delivery, message

pytestmark = pytest.mark.django_db


@pytest.fixture
def delete_receiver() -> Iterator[None]:
    """A receiver of ``pre_delete`` for deliveries while the test runs."""

    def receive(sender: type, **kwargs: Any) -> None:
        pass

    pre_delete.connect(receive, sender=Delivery, weak=False, dispatch_uid="test-pruning")
    try:
        yield
    finally:
        pre_delete.disconnect(sender=Delivery, dispatch_uid="test-pruning")


def test_the_statement_deletes_the_history_and_unlinks_the_payments() -> None:
    statement = one_statement()
    assert statement is not None
    quote = connection.ops.quote_name
    attempts, payments = quote(Attempt._meta.db_table), quote(PaymentAttempt._meta.db_table)
    assert f"DELETE FROM {attempts} WHERE" in statement
    assert f"UPDATE {payments} SET {quote('delivery_id')} = NULL" in statement
    assert f"DELETE FROM {quote(Delivery._meta.db_table)} WHERE id IN" in statement


def test_a_delete_signal_receiver_leaves_the_batch_to_django(delete_receiver: None) -> None:
    assert one_statement() is None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the statement is PostgreSQL's")
@override_settings(OUTBOX_RETENTION_SECONDS=60)
def test_on_postgresql_a_batch_is_one_statement_with_its_history() -> None:
    parent = message(created_at=ago(3600))
    old = delivery(parent, DeliveryState.FAILED, finished_at=ago(600))
    Attempt.objects.create(delivery=old, number=1, host=old.host, at=ago(700), result="retry")
    with CaptureQueriesContext(connection) as seen:
        assert prune() == 2
    assert sum(query["sql"].startswith("WITH doomed") for query in seen.captured_queries) == 1
    assert not Delivery.objects.exists() and not Attempt.objects.exists()

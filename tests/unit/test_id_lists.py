"""The store's written-out statements match exactly the ids they are given, on either
database: one array parameter on PostgreSQL, an ``IN`` list elsewhere."""

from __future__ import annotations

import pytest
from django.db import connection

from django_outbox.models import Delivery
from django_outbox.store.id_lists import ids_match
from tests.support.rows import delivery, message

pytestmark = pytest.mark.django_db


def selected(ids: list[int]) -> list[int]:
    matching, params = ids_match("id", ids)
    table = connection.ops.quote_name(Delivery._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {table} WHERE {matching} ORDER BY id", params)
        return [row[0] for row in cursor.fetchall()]


def test_matches_the_given_ids_and_no_other() -> None:
    parent = message()
    rows = [delivery(parent, inbox=f"https://a.example/inbox/{i}").pk for i in range(5)]
    assert selected([rows[3], rows[1], 10**12]) == [rows[1], rows[3]]
    assert selected([rows[0]]) == [rows[0]]


def test_the_statement_text_does_not_grow_with_the_ids_on_postgresql() -> None:
    few, many = ids_match("id", [1, 2]), ids_match("id", list(range(500)))
    if connection.vendor == "postgresql":
        assert few[0] == many[0] == "id = ANY(%s)"
        assert many[1] == [list(range(500))]
    else:
        assert many[0].count("%s") == 500 and many[1] == list(range(500))

"""On PostgreSQL, nothing ``send()`` stores is cut to fit a column.

The bulk insert cast its arrays to ``varchar(n)[]``, which PostgreSQL cuts without a
word: an inbox URL of 2,141 characters was stored as 2,048 and posted to as such.
"""

from __future__ import annotations

import pytest
from django.db import DataError, transaction
from django.test import override_settings
from django.utils import timezone

from django_outbox import outbox
from django_outbox.exceptions import InvalidInbox
from django_outbox.models import Delivery, Message
from django_outbox.sending.fanout import expand
from django_outbox.store.bulk_insert import bulk_insert
from testproject.demo.keys import ACTOR

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

ACTIVITY = {"type": "Create", "id": "https://demo.example/notes/1"}
BASE = "https://remote.example/"


def url_of(length: int, tail: str = "") -> str:
    return BASE + "a" * (length - len(BASE) - len(tail)) + tail


def test_send_refuses_an_inbox_longer_than_its_column() -> None:
    with pytest.raises(InvalidInbox, match="longer than 2048"):
        outbox.send(ACTOR, ACTIVITY, [url_of(2141)])
    assert not Message.objects.exists() and not Delivery.objects.exists()


def test_the_bulk_insert_raises_rather_than_cuts() -> None:
    message = outbox.send(ACTOR, ACTIVITY, [url_of(100)])
    assert message is not None
    with pytest.raises(DataError), transaction.atomic():
        bulk_insert(message, [url_of(2141)], ["remote.example"], [[]], set(), timezone.now())
    assert list(Delivery.objects.values_list("inbox", flat=True)) == [url_of(100)]


@pytest.mark.parametrize("inline", [True, False])
def test_inboxes_at_the_limit_are_stored_whole(inline: bool) -> None:
    urls = [url_of(2048, f"/{i}") for i in range(20)]
    with override_settings(OUTBOX_INLINE_FANOUT=100 if inline else 10):
        message = outbox.send(ACTOR, ACTIVITY, urls)
    assert message is not None
    if not inline:
        assert expand(message.pk) == 20
    assert sorted(Delivery.objects.values_list("inbox", flat=True)) == sorted(urls)

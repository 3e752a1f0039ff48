"""A limit on the inboxes of one send, and large fan-outs stored in slices.

1,000,000 inboxes took 2.4 s, 230 MiB and one 40 MiB row.  ``OUTBOX_MAX_INBOXES``
bounds a send; the inboxes of a large fan-out are stored a few thousand a row and
expanded a slice at a time, each slice in one transaction.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_outbox import outbox
from django_outbox.broker import publish
from django_outbox.conf import conf
from django_outbox.exceptions import TooManyInboxes
from django_outbox.models import Delivery, Message, PendingInboxes
from django_outbox.sending import fanout
from django_outbox.sending.fanout import FIRST_SLICE, SLICE, SLICE_CHARS, expand
from django_outbox.store import pruning
from django_outbox.upkeep import sweeper
from testproject.demo.keys import ACTOR
from tests.support.sends import ACTIVITY, inboxes, rows_written

pytestmark = pytest.mark.django_db


def test_the_default_limit_is_documented_and_a_hundred_thousand() -> None:
    assert conf.MAX_INBOXES == 100_000


@pytest.mark.parametrize("shape", [list, tuple, iter])
def test_more_distinct_inboxes_than_the_limit_are_refused(shape: type) -> None:
    with override_settings(OUTBOX_MAX_INBOXES=10):
        with pytest.raises(TooManyInboxes, match="OUTBOX_MAX_INBOXES"):
            outbox.send(ACTOR, ACTIVITY, shape(inboxes(11, hosts=997)))
        assert rows_written() == 0
        message = outbox.send(ACTOR, ACTIVITY, shape(inboxes(10, hosts=997) * 3))
    assert message is not None and message.inbox_count == 10


def test_too_many_inboxes_are_refused_before_any_is_read() -> None:
    urls = [f"not a URL {i}" for i in range(150_000)]
    with pytest.raises(TooManyInboxes):
        outbox.send(ACTOR, ACTIVITY, urls)
    assert rows_written() == 0


def test_portable_sends_have_the_limit_too() -> None:
    from django_outbox import PortableInbox

    did = "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2"
    portable = [PortableInbox(f"ap://{did}/u{i}", ["https://g.example"]) for i in range(3)]
    with override_settings(OUTBOX_MAX_INBOXES=2), pytest.raises(TooManyInboxes):
        outbox.send_portable(ACTOR, ACTIVITY, portable)
    assert rows_written() == 0


def slices(message: Message) -> list[list[str]]:
    rows = PendingInboxes.objects.filter(message=message).order_by("seq")
    return [row.inboxes.split("\n") for row in rows]


def test_a_large_fan_out_is_stored_in_slices_and_expanded_slice_by_slice() -> None:
    urls = inboxes(5_600, hosts=997)
    with override_settings(OUTBOX_INLINE_FANOUT=10):
        message = outbox.send(ACTOR, ACTIVITY, urls)
    assert message is not None and not Delivery.objects.exists()
    stored = slices(message)
    assert [len(part) for part in stored] == [FIRST_SLICE, SLICE, 100]
    assert [url for part in stored for url in part] == urls
    assert expand(message.pk) == 5_600
    assert expand(message.pk) == 0
    assert not PendingInboxes.objects.exists()
    assert sorted(Delivery.objects.values_list("inbox", flat=True)) == sorted(urls)


def test_a_slice_of_long_urls_holds_fewer_of_them() -> None:
    urls = inboxes(1200, hosts=997, path="x" * 1900)
    with override_settings(OUTBOX_INLINE_FANOUT=10):
        message = outbox.send(ACTOR, ACTIVITY, urls)
    assert message is not None
    rows = PendingInboxes.objects.filter(message=message)
    assert max(len(row.inboxes) for row in rows) <= SLICE_CHARS
    assert [url for part in slices(message) for url in part] == urls


def test_an_expansion_that_crashed_resumes_without_writing_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    urls = inboxes(6_000, hosts=997)
    with override_settings(OUTBOX_INLINE_FANOUT=10):
        message = outbox.send(ACTOR, ACTIVITY, urls)
    assert message is not None
    real = fanout.write_deliveries
    calls: list[int] = []

    def crash_on_the_second_slice(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the worker died")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fanout, "write_deliveries", crash_on_the_second_slice)
    with pytest.raises(RuntimeError):
        expand(message.pk)
    assert Delivery.objects.count() == FIRST_SLICE
    assert PendingInboxes.objects.count() == 2
    monkeypatch.setattr(fanout, "write_deliveries", real)
    assert expand(message.pk) == 6_000 - FIRST_SLICE
    assert Delivery.objects.count() == 6_000
    assert not PendingInboxes.objects.exists()


def test_the_sweeper_restarts_lost_expansions_and_keeps_their_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with override_settings(OUTBOX_INLINE_FANOUT=10):
        pending = outbox.send(ACTOR, ACTIVITY, inboxes(20, hosts=997))
        done = outbox.send(ACTOR, ACTIVITY, inboxes(5, hosts=997))
    assert pending is not None and done is not None
    old = timezone.now() - timedelta(days=30)
    Message.objects.update(created_at=old)
    Delivery.objects.update(state="delivered", finished_at=old)
    started: list[tuple[int, str]] = []
    monkeypatch.setattr(publish, "start_expansion", lambda pk, lane: started.append((pk, lane)))
    assert sweeper.expand_lost() == 1
    assert started == [(pending.pk, pending.lane)]
    pruning.prune()
    assert list(Message.objects.values_list("pk", flat=True)) == [pending.pk]

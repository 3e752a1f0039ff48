"""outbox.progress: a message's recipients by state, before and after its fan-out is
expanded, with recipients collapsed into shared inboxes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings

from django_outbox import Batch, Progress, Recipient, outbox
from django_outbox.exceptions import UnknownMessage
from django_outbox.models import Delivery, Message, PendingInboxes
from django_outbox.sending.fanout import expand, write_deliveries
from django_outbox.testing import FakeInbox, captured_sends
from django_outbox.testing.inbox import Answer, InboxRequest
from testproject.demo.keys import ACTOR
from tests.support.sends import ACTIVITY, inboxes

pytestmark = pytest.mark.django_db


def test_progress_counts_deliveries_by_state() -> None:
    urls = inboxes(6, "progress")
    message = outbox.send(ACTOR, ACTIVITY, urls)
    assert outbox.progress(message) == Progress(pending=6)
    states = ["delivered", "delivered", "failed", "refused", "skipped", "sending"]
    for url, state in zip(urls, states, strict=True):
        Delivery.objects.filter(inbox=url).update(state=state)
    found = outbox.progress(message)
    assert found == Progress(delivered=2, pending=1, failed=1, refused=1, skipped=1)
    assert (found.total, found.done) == (6, False)
    assert found.as_dict() == {
        "delivered": 2,
        "pending": 1,
        "failed": 1,
        "refused": 1,
        "skipped": 1,
        "total": 6,
    }


def test_progress_after_delivery_through_the_worker(
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    urls = inboxes(4, "worked")

    def answer(request: InboxRequest) -> Answer:
        return {urls[0]: 202, urls[1]: 202, urls[2]: 410}.get(request.url, 503)

    with captured_sends() as capture:
        with django_capture_on_commit_callbacks(execute=True):
            message = outbox.send(ACTOR, ACTIVITY, urls, batch=Batch(max_attempts=2))
        capture.deliver_all(answer)
        assert outbox.progress(message) == Progress(delivered=2, refused=1, pending=1)
        capture.deliver_all(FakeInbox(503), retry_now=True)
    assert outbox.progress(message) == Progress(delivered=2, refused=1, failed=1)
    assert outbox.progress(message).done


def test_a_fan_out_counts_in_full_before_and_during_its_expansion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("django_outbox.sending.fanout.FIRST_SLICE", 3)
    monkeypatch.setattr("django_outbox.sending.fanout.SLICE", 4)
    urls = inboxes(10, "fanout")
    with override_settings(OUTBOX_INLINE_FANOUT=5):
        message = outbox.send(ACTOR, ACTIVITY, urls)
    assert message is not None
    assert not Delivery.objects.exists() and PendingInboxes.objects.count() == 3
    assert outbox.progress(message) == Progress(pending=10)
    first = PendingInboxes.objects.filter(message=message).order_by("seq").first()
    assert first is not None
    write_deliveries(message, first.inboxes.split("\n"))  # one slice expanded, as expand does
    first.delete()
    Delivery.objects.filter(inbox=urls[0]).update(state="delivered")
    assert outbox.progress(message) == Progress(delivered=1, pending=9)
    assert expand(message.pk) == 7
    assert outbox.progress(message) == Progress(delivered=1, pending=9)


def test_recipients_behind_one_shared_inbox_count_as_that_inbox() -> None:
    shared = "https://big.example/inbox"
    followers = [Recipient(f"https://big.example/users/u{i}/inbox", shared) for i in range(5)]
    alone = Recipient("https://small.example/users/x/inbox")
    message = outbox.send(ACTOR, ACTIVITY, [*followers, alone])
    assert outbox.progress(message) == Progress(pending=2)
    Delivery.objects.filter(inbox=shared).update(state="delivered")
    assert outbox.progress(message) == Progress(delivered=1, pending=1)
    unshared = outbox.send(ACTOR, ACTIVITY, [*followers, alone], prefer_shared_inbox=False)
    assert outbox.progress(unshared).total == 6


def test_progress_takes_a_message_its_id_or_none_in_one_query(
    django_assert_num_queries: Callable[..., Any],
) -> None:
    message = outbox.send(ACTOR, ACTIVITY, inboxes(3, "ids"))
    assert message is not None
    with django_assert_num_queries(1):
        by_id = outbox.progress(message.pk)
    assert by_id == outbox.progress(message) == Progress(pending=3)
    assert outbox.progress(None) == Progress() and Progress().total == 0
    assert outbox.progress(outbox.send(ACTOR, ACTIVITY, [])) == Progress()


@pytest.mark.parametrize("wrong", [10**9, "1", 1.0, True, object()])
def test_progress_of_what_is_not_a_stored_message_raises(wrong: object) -> None:
    with pytest.raises(UnknownMessage):
        outbox.progress(wrong)  # type: ignore[arg-type]


def test_progress_of_a_pruned_message_raises() -> None:
    message = outbox.send(ACTOR, ACTIVITY, inboxes(1, "pruned"))
    assert message is not None
    Message.objects.filter(pk=message.pk).delete()
    with pytest.raises(UnknownMessage, match="pruned"):
        outbox.progress(message)

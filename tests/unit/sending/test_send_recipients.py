"""outbox.send to recipients: one delivery per shared inbox, the sender's own hosts left out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.test import override_settings

from django_outbox import Recipient, outbox
from django_outbox.exceptions import InvalidInbox, InvalidSend, OutboxConfigurationError
from django_outbox.models import Delivery, Message
from django_outbox.sending.recipients import InvalidRecipient
from testproject.demo.keys import ACTOR
from tests.support.sender_keys import good_key

pytestmark = pytest.mark.django_db

NOTE = {"@context": "https://www.w3.org/ns/activitystreams", "type": "Create", "id": "n"}


@dataclass
class Actor:
    """An application's actor model, as ``send`` reads it."""

    uri: str
    inbox: str | None
    shared_inbox: str | None


ALICE = Recipient("https://a.example/users/alice/inbox", "https://a.example/inbox")
BOB = Actor(
    "https://a.example/users/bob", "https://a.example/users/bob/inbox", "https://a.example/inbox"
)
CAROL = Recipient("https://c.example/users/carol/inbox")
DAVE = Actor("https://d.example/@dave", "https://d.example/@dave/inbox", "https://d.example/inbox")
# On the sender's own host (the actor id is https://demo.example/users/alice).
LOCAL = Recipient("https://demo.example/users/eve/inbox", "https://demo.example/inbox")
RELAY = "https://relay.example/inbox"


def targets() -> list[str]:
    return list(Delivery.objects.order_by("id").values_list("inbox", flat=True))


def test_recipients_are_sent_one_delivery_per_shared_inbox_in_first_order() -> None:
    message = outbox.send(ACTOR, NOTE, [CAROL, ALICE, RELAY, BOB, DAVE, CAROL, LOCAL])
    assert message is not None and message.inbox_count == 4
    assert targets() == [CAROL.inbox, "https://a.example/inbox", RELAY, "https://d.example/inbox"]


def test_without_shared_inboxes_each_recipient_gets_its_own() -> None:
    outbox.send(ACTOR, NOTE, [ALICE, BOB, CAROL], prefer_shared_inbox=False)
    assert targets() == [ALICE.inbox, BOB.inbox, CAROL.inbox]


def test_sharing_is_a_setting_that_the_call_overrides() -> None:
    with override_settings(OUTBOX_PREFER_SHARED_INBOX=False):
        outbox.send(ACTOR, NOTE, [ALICE, BOB])
        assert targets() == [ALICE.inbox, BOB.inbox]
        Delivery.objects.all().delete()
        outbox.send(ACTOR, NOTE, [ALICE, BOB], prefer_shared_inbox=True)
        assert targets() == ["https://a.example/inbox"]


def test_the_senders_own_host_and_the_local_hosts_are_left_out_by_default() -> None:
    mirror = Recipient("https://mirror.example/users/m/inbox")
    with override_settings(OUTBOX_LOCAL_HOSTS=["MIRROR.example"]):
        outbox.send(ACTOR, NOTE, [LOCAL, "https://demo.example:8443/inbox", mirror, CAROL])
    assert targets() == [CAROL.inbox]


def test_exclude_hosts_replaces_the_default() -> None:
    outbox.send(ACTOR, NOTE, [LOCAL, CAROL, ALICE], exclude_hosts=["c.example"])
    assert targets() == ["https://demo.example/inbox", "https://a.example/inbox"]
    Delivery.objects.all().delete()
    outbox.send(ACTOR, NOTE, [LOCAL], exclude_hosts=())
    assert targets() == ["https://demo.example/inbox"]


def test_a_plain_url_list_on_the_senders_host_is_filtered_too() -> None:
    urls = [f"https://h{i}.example/inbox" for i in range(3)] + ["https://Demo.Example/x/inbox"]
    message = outbox.send(ACTOR, NOTE, urls)
    assert message is not None and targets() == urls[:3]


def test_a_send_to_local_recipients_only_writes_nothing() -> None:
    assert outbox.send(ACTOR, NOTE, [LOCAL, "https://demo.example/users/x/inbox"]) is None
    assert not Message.objects.exists()


def test_an_actor_without_a_url_id_excludes_no_host() -> None:
    with override_settings(OUTBOX_KEY_RESOLVER=lambda actor: good_key()):
        outbox.send("acct:alice@demo.example", NOTE, [LOCAL])
    assert targets() == ["https://demo.example/inbox"]


def test_recipients_may_come_from_a_generator() -> None:
    outbox.send(ACTOR, NOTE, (r for r in [ALICE, BOB, CAROL]))
    assert targets() == ["https://a.example/inbox", CAROL.inbox]


@pytest.mark.parametrize(
    ("recipients", "error"),
    [
        ([ALICE, None], InvalidRecipient),
        ([object()], InvalidRecipient),
        ([Actor("https://x.example/u", None, None)], InvalidRecipient),
        ([Actor("https://x.example/u", "", "")], InvalidRecipient),
        ([Recipient(42)], InvalidRecipient),  # type: ignore[arg-type]
        ([""], InvalidRecipient),
        ("https://a.example/inbox", InvalidRecipient),
        ([Recipient("ftp://x.example/inbox")], InvalidInbox),
        ([Recipient("https://x.example/u/inbox", "https://x.example/inbox#f")], InvalidInbox),
        ([CAROL, "https://user:pw@y.example/inbox"], InvalidInbox),
    ],
)
def test_bad_recipients_raise_a_typed_error_and_write_nothing(
    recipients: Any, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        outbox.send(ACTOR, NOTE, recipients)
    assert isinstance(raised.value, InvalidSend)
    assert not Message.objects.exists() and not Delivery.objects.exists()


def test_a_bad_exclusion_is_a_typed_error() -> None:
    with pytest.raises(InvalidRecipient):
        outbox.send(ACTOR, NOTE, [ALICE], exclude_hosts="a.example")  # type: ignore[arg-type]
    with override_settings(OUTBOX_LOCAL_HOSTS="a.example"), pytest.raises(OutboxConfigurationError):
        outbox.send(ACTOR, NOTE, [ALICE])
    assert not Message.objects.exists()

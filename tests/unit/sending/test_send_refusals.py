"""``send()`` refuses with a typed error, writing nothing, whatever
would fail later: in the database (NUL, over-long values), in the worker on every
attempt for two days (a content type with CR/LF, an unusable host or key), or in
Python itself (a deeply nested activity, inboxes that are no list of strings).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.test import override_settings

from django_outbox import Batch, outbox
from django_outbox.exceptions import (
    BodyTooLarge,
    InvalidActivity,
    InvalidBatch,
    InvalidInbox,
    InvalidSend,
    InvalidSenderKey,
    SenderTooLong,
    UnknownSender,
)
from django_outbox.models import Delivery, Message
from django_outbox.sending import keys
from django_outbox.sending.keys import SenderKey
from testproject.demo.keys import ACTOR
from tests.support.sender_keys import (
    KEY_ID,
    ec_pem,
    encrypted_pem,
    garbage_pem,
    good_key,
    resolver_returning,
)
from tests.support.sends import ACTIVITY, rows_written

pytestmark = pytest.mark.django_db

INBOX = "https://ok.example/inbox"


def nested(depth: int) -> dict[str, Any]:
    activity: dict[str, Any] = {"type": "Note"}
    for _ in range(depth):
        activity = {"type": "Note", "object": activity}
    return activity


def send(**call: Any) -> Callable[[], object]:
    """A call of ``outbox.send`` with ``call`` replacing the good defaults."""
    args = {"actor": ACTOR, "activity": ACTIVITY, "inboxes": [INBOX]} | call
    options = {k: args.pop(k) for k in ("batch", "content_type") if k in args}
    return lambda: outbox.send(args["actor"], args["activity"], args["inboxes"], **options)


LONG_URL = "https://ok.example/" + "a" * 2123  # 2,141 characters, as one was cut to 2,048
CASES: list[tuple[str, Callable[[], Callable[[], object]], type[InvalidSend]]] = [
    ("deeply nested activity", lambda: send(activity=nested(100_000)), InvalidActivity),
    ("inboxes None", lambda: send(inboxes=None), InvalidInbox),
    ("inboxes 42", lambda: send(inboxes=42), InvalidInbox),
    ("an inbox None", lambda: send(inboxes=[INBOX, None]), InvalidInbox),
    ("an unhashable inbox", lambda: send(inboxes=[INBOX, [INBOX]]), InvalidInbox),
    ("inboxes a set of lists", lambda: send(inboxes=({"a": 1},)), InvalidInbox),
    ("batch a string", lambda: send(batch="x"), InvalidBatch),
    ("batch a dict", lambda: send(batch={"tag": "x"}), InvalidBatch),
    ("NUL in the actor id", lambda: send(actor=ACTOR + "\x00x"), UnknownSender),
    ("actor id too long", lambda: send(actor=ACTOR + "x" * 2048), SenderTooLong),
    ("actor id None", lambda: send(actor=None), UnknownSender),
    ("CR/LF in the content type", lambda: send(content_type="a/b\r\nX-Evil: 1"), InvalidActivity),
    ("content type too long", lambda: send(content_type="a/" + "b" * 199), InvalidActivity),
    ("content type no media type", lambda: send(content_type="json"), InvalidActivity),
    ("content type not a string", lambda: send(content_type=None), InvalidActivity),
    ("invalid IDNA host", lambda: send(inboxes=["https://xn--abc.example/inbox"]), InvalidInbox),
    ("empty label", lambda: send(inboxes=["https://.bad.example/inbox"]), InvalidInbox),
    ("URL of 2,141 characters", lambda: send(inboxes=[LONG_URL]), InvalidInbox),
    ("NUL in the type", lambda: send(activity={"type": "Cre\x00ate"}), InvalidActivity),
    ("type too long", lambda: send(activity={"type": "T" * 101}), InvalidActivity),
    ("NUL in the tag", lambda: send(batch=Batch(tag="a\x00b")), InvalidBatch),
    ("NUL in the ordering key", lambda: send(batch=Batch(ordering_key="\x00")), InvalidBatch),
    (
        "a flag that is no bool",
        lambda: send(batch=Batch(synchronize_collection="yes")),  # type: ignore[arg-type]
        InvalidBatch,
    ),
    (
        "a deadline out of UTC's range",
        lambda: send(batch=Batch(deadline=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))))),
        InvalidBatch,
    ),
    ("a body too large", lambda: send(activity={"content": "x" * (1 << 20)}), BodyTooLarge),
]


@pytest.mark.parametrize(("make", "error"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_with_a_typed_error_and_nothing_written(
    make: Callable[[], Callable[[], object]], error: type[InvalidSend]
) -> None:
    with pytest.raises(error) as raised:
        make()()
    assert isinstance(raised.value, InvalidSend)
    assert rows_written() == 0


KEYS: list[tuple[str, Callable[[], object]]] = [
    ("an EC key", lambda: SenderKey(KEY_ID, ec_pem())),
    ("an encrypted key", lambda: SenderKey(KEY_ID, encrypted_pem())),
    ("garbage", lambda: SenderKey(KEY_ID, garbage_pem())),
    ("a public key", lambda: SenderKey(KEY_ID, keys.public_pem(good_key().private_key_pem))),
    ("a PEM that is no string", lambda: SenderKey(KEY_ID, b"-----BEGIN")),  # type: ignore[arg-type]
    (
        "a key id with a quote",
        lambda: SenderKey('https://a.example/#"k"', good_key().private_key_pem),
    ),
    ("an empty key id", lambda: SenderKey("", good_key().private_key_pem)),
    ("no SenderKey", lambda: {"key_id": KEY_ID, "private_key_pem": "x"}),
]


@pytest.mark.parametrize("make_key", [k[1] for k in KEYS], ids=[k[0] for k in KEYS])
def test_a_key_no_worker_could_sign_with_is_refused_at_send(
    make_key: Callable[[], object],
) -> None:
    with (
        override_settings(OUTBOX_KEY_RESOLVER=resolver_returning(make_key())),
        pytest.raises(InvalidSenderKey),
    ):
        outbox.send(ACTOR, ACTIVITY, [INBOX])
    assert rows_written() == 0


def test_a_missing_key_is_still_an_unknown_sender() -> None:
    with (
        override_settings(OUTBOX_KEY_RESOLVER=resolver_returning(None)),
        pytest.raises(UnknownSender),
    ):
        outbox.send(ACTOR, ACTIVITY, [INBOX])


def test_a_key_is_parsed_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[object] = []
    real = keys.serialization.load_pem_private_key

    def counting(*args: Any, **kwargs: Any) -> Any:
        parsed.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(keys.serialization, "load_pem_private_key", counting)
    with override_settings(OUTBOX_KEY_RESOLVER=resolver_returning(good_key())):
        for _ in range(3):
            outbox.send(ACTOR, ACTIVITY, [INBOX])
    assert len(parsed) == 1
    assert Message.objects.count() == 3


def test_values_at_their_limits_are_stored_whole() -> None:
    url = "https://ok.example/" + "a" * (2048 - len("https://ok.example/"))
    actor = ACTOR + "x" * (2048 - len(ACTOR))
    content_type = 'application/ld+json; profile="https://www.w3.org/ns/activitystreams"'
    batch = Batch(tag="t" * 200, ordering_key="k" * 500, deadline=datetime.now(UTC))
    message = outbox.send(actor, {"type": "T" * 100}, [url], batch=batch, content_type=content_type)
    assert message is not None
    message.refresh_from_db()
    assert (message.sender, message.activity_type) == (actor, "T" * 100)
    assert (message.tag, message.ordering_key) == ("t" * 200, "k" * 500)
    assert message.content_type == content_type
    assert Delivery.objects.get().inbox == url


def test_a_type_that_is_no_string_is_stored_as_none() -> None:
    message = outbox.send(ACTOR, {"type": {"not": "a string"}}, [INBOX])
    assert message is not None and message.activity_type == ""

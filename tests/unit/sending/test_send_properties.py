"""Properties of ``send()`` for any input (hypothesis).

Whatever it is given, ``send()`` either stores inbox URLs whose stored host is exactly
the host the transport connects to (and the ``Host`` that signing covers), or raises
:class:`~django_outbox.exceptions.InvalidSend` having written nothing.  No other
exception escapes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from django_outbox import Batch, outbox
from django_outbox.conf import conf
from django_outbox.exceptions import BlockedInbox, InvalidSend
from django_outbox.models import Delivery
from django_outbox.transport.addresses import parse_networks, refusal_without_dns
from django_outbox.transport.target import parse_target
from testproject.demo.keys import ACTOR
from tests.support.inbox_url_samples import FAST_CANDIDATES, HOSTILE_URLS, TYPICAL, VALID_URLS
from tests.support.sends import ACTIVITY, contacted_host, rows_written, signed_host_header

pytestmark = pytest.mark.django_db

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

ANYTHING = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.just(10**5000)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["\ud800", "\x00", "a\r\nb", "\u202e"])
    | st.binary(max_size=20)
    | st.lists(st.text(max_size=5), max_size=3)
    | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)
)
URLS = HOSTILE_URLS | VALID_URLS | FAST_CANDIDATES | st.sampled_from(TYPICAL) | st.text()
INBOX_LISTS = st.lists(URLS | ANYTHING, max_size=6)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=5) | st.integers() | st.tuples(st.integers()), children)
    ),
    max_leaves=15,
)
ACTIVITIES = (
    st.builds(
        lambda kind, rest: {**rest, "type": kind},
        st.text(max_size=120) | st.lists(st.text(max_size=5), max_size=2) | ANYTHING,
        st.dictionaries(st.text(max_size=5), JSON, max_size=4),
    )
    | st.dictionaries(st.text(max_size=5), JSON, max_size=4)
    | ANYTHING
)
ACTORS = st.just(ACTOR) | st.builds(lambda tail: ACTOR + tail, st.text(max_size=30)) | ANYTHING
CONTENT_TYPES = (
    st.just("application/activity+json")
    | st.just('application/ld+json; profile="https://www.w3.org/ns/activitystreams"')
    | st.from_regex(r"[a-z]+/[a-z+.-]+(; ?[a-z]+=(\"[^\"\\\r\n]*\"|[a-z0-9]+))?", fullmatch=True)
    | ANYTHING
)


@dataclass
class BatchArguments:
    """Arguments for ``Batch``, which refuses bad ones itself: built inside the test."""

    kwargs: dict[str, Any]


BATCHES = (
    st.none()
    | st.builds(
        lambda **kwargs: BatchArguments(kwargs),
        tag=st.none() | st.text(max_size=210) | ANYTHING,
        deadline=st.none() | st.datetimes(timezones=st.none() | st.timezones()) | ANYTHING,
        ordering_key=st.none() | st.text(max_size=20) | ANYTHING,
        max_attempts=st.none() | st.integers(-2, 40) | ANYTHING,
        low_priority=st.booleans() | ANYTHING,
        synchronize_collection=st.booleans() | ANYTHING,
    )
    | ANYTHING
)


def stored_as_contacted_or_refused(call: Callable[[], object]) -> None:
    """Run ``call`` (a send) in a transaction rolled back after: it stores inboxes as
    contacted, or raises InvalidSend having written nothing; anything else fails."""
    with transaction.atomic():
        try:
            call()
        except InvalidSend as error:
            event(f"refused: {type(error).__name__}")
            assert rows_written() == 0
        else:
            event("accepted")
            assert_stored_as_contacted()
        transaction.set_rollback(True)


def mostly(good: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` two times in three: every check is reached, not only the first."""
    return st.integers(0, 2).flatmap(lambda n: other if n == 0 else good)


def refused_by_workers(url: str) -> bool:
    """Whether every worker would refuse ``url``'s host without DNS (as the settings allow)."""
    allowed = parse_networks(conf.ALLOWED_NETWORKS)
    return refusal_without_dns(parse_target(url).host, allowed) is not None


def assert_stored_as_contacted() -> None:
    """Each stored inbox is canonical; its host is the one contacted and signed, and one
    a worker will try."""
    for inbox, host in Delivery.objects.values_list("inbox", "host"):
        target = parse_target(inbox)
        assert target.url == inbox
        assert host == target.host == contacted_host(inbox)
        assert signed_host_header(inbox) == target.host_header
        assert not refused_by_workers(inbox)


@SETTINGS
@given(st.lists(mostly(VALID_URLS | st.sampled_from(TYPICAL), URLS | ANYTHING), max_size=6))
@example(["http://h\\.example/inbox"])
@example(["http://h.example\\@evil.example/inbox", "https://h.example/inbox"])
@example(["https://.bad.example/inbox"])
def test_any_inboxes_are_stored_as_contacted_or_refused(inboxes: list[object]) -> None:
    stored_as_contacted_or_refused(lambda: outbox.send(ACTOR, ACTIVITY, inboxes))


@SETTINGS
@given(st.lists(VALID_URLS, min_size=1, max_size=6))
def test_valid_urls_are_accepted_in_canonical_form_unless_a_worker_refuses_them(
    urls: list[str],
) -> None:
    with transaction.atomic():
        if any(refused_by_workers(url) for url in urls):
            with pytest.raises(BlockedInbox):
                outbox.send(ACTOR, ACTIVITY, urls)
            assert rows_written() == 0
        else:
            outbox.send(ACTOR, ACTIVITY, urls)
            stored = set(Delivery.objects.values_list("inbox", flat=True))
            assert stored == {parse_target(url).url for url in urls}
            assert_stored_as_contacted()
        transaction.set_rollback(True)


@SETTINGS
@given(
    actor=mostly(st.just(ACTOR), ACTORS),
    activity=mostly(st.just(ACTIVITY), ACTIVITIES),
    inboxes=mostly(st.lists(st.sampled_from(TYPICAL), max_size=3), INBOX_LISTS | ANYTHING),
    batch=mostly(st.none(), BATCHES),
    content_type=mostly(st.just("application/activity+json"), CONTENT_TYPES),
)
def test_nothing_but_invalid_send_escapes(
    actor: object, activity: object, inboxes: object, batch: object, content_type: object
) -> None:

    def call() -> object:
        built = Batch(**batch.kwargs) if isinstance(batch, BatchArguments) else batch
        return outbox.send(actor, activity, inboxes, batch=built, content_type=content_type)  # type: ignore[arg-type]

    stored_as_contacted_or_refused(call)


@SETTINGS
@given(
    sender=mostly(st.just("shop"), ANYTHING),
    payload=mostly(st.just({"type": "order.paid", "id": 7}), ACTIVITIES),
    endpoints=mostly(st.lists(st.sampled_from(TYPICAL), max_size=3), INBOX_LISTS | ANYTHING),
    batch=mostly(st.none(), BATCHES),
    content_type=mostly(st.just("application/json"), CONTENT_TYPES),
    webhook_id=mostly(st.none(), st.text(max_size=20) | ANYTHING),
)
def test_nothing_but_invalid_send_escapes_a_webhook(
    sender: object,
    payload: object,
    endpoints: object,
    batch: object,
    content_type: object,
    webhook_id: object,
) -> None:
    def call() -> object:
        built = Batch(**batch.kwargs) if isinstance(batch, BatchArguments) else batch
        return outbox.send_webhook(
            sender,  # type: ignore[arg-type]
            payload,  # type: ignore[arg-type]
            endpoints,  # type: ignore[arg-type]
            batch=built,  # type: ignore[arg-type]
            content_type=content_type,  # type: ignore[arg-type]
            webhook_id=webhook_id,  # type: ignore[arg-type]
        )

    stored_as_contacted_or_refused(call)

"""No frame of an error raised over a bad sender key holds the key.

Error trackers record the local variables of every frame of a traceback (Sentry does
by default).  ``InvalidSigningKey`` used to be raised where a local held the PEM.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import traceback
from collections.abc import Callable, Iterator
from types import FrameType

import pytest
from django.test import override_settings

from django_outbox import outbox
from django_outbox.breakers import MemoryBreakerStore
from django_outbox.exceptions import InvalidSenderKey
from django_outbox.sending import keys
from django_outbox.sending.keys import InvalidSigningKey, SenderKey
from django_outbox.signing import Scheme, sign_headers
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.worker.attempt import Job, perform
from testproject.demo.keys import ACTOR
from tests.support.sender_keys import KEY_ID, ec_pem, encrypted_pem, garbage_pem, resolver_returning
from tests.support.sends import ACTIVITY, RecordingTransport

MAKERS = {"ec": ec_pem, "encrypted": encrypted_pem, "garbage": garbage_pem}


@pytest.fixture(params=sorted(MAKERS))
def bad_key(request: pytest.FixtureRequest) -> SenderKey:
    """A key no worker can sign with; its PEM is never a local of the test itself."""
    return SenderKey(KEY_ID, MAKERS[request.param]())


def frames(error: BaseException) -> Iterator[FrameType]:
    """Every frame of ``error``'s traceback and of the errors chained to it."""
    seen: set[int] = set()
    stack = [error]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        tb = current.__traceback__
        while tb is not None:
            yield tb.tb_frame
            tb = tb.tb_next
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)


def assert_no_key_material(error: BaseException, key: SenderKey) -> None:
    """Neither the formatted traceback with locals nor any frame's locals hold the key."""
    text = "".join(traceback.TracebackException.from_exception(error, capture_locals=True).format())
    secrets = [line for line in key.private_key_pem.splitlines() if not line.startswith("-----")]
    assert secrets
    for secret in secrets:
        assert secret not in text
    for frame in frames(error):
        for name, value in frame.f_locals.items():
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            if isinstance(value, str):
                assert not any(s in value for s in secrets), (frame.f_code.co_name, name)
            assert not any(s in repr(value) for s in secrets), (frame.f_code.co_name, name)


def raised_by(call: Callable[[], object]) -> BaseException:
    with pytest.raises(InvalidSigningKey) as raised:
        call()
    return raised.value


def test_signing_with_a_bad_key(bad_key: SenderKey) -> None:
    error = raised_by(
        lambda: sign_headers(
            Scheme.CAVAGE,
            bad_key,
            method="POST",
            url="https://remote.example/inbox",
            body=b"{}",
            content_type="application/activity+json",
            body_sha256=hashlib.sha256(b"{}").digest(),
        )
    )
    assert_no_key_material(error, bad_key)


def test_loading_and_deriving_the_public_key(bad_key: SenderKey) -> None:
    assert_no_key_material(
        raised_by(lambda: keys.load_private_key(bad_key.private_key_pem)), bad_key
    )
    assert_no_key_material(raised_by(lambda: keys.public_pem(bad_key.private_key_pem)), bad_key)


LOCAL_CACHE = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}


@override_settings(CACHES=LOCAL_CACHE)  # the scheme an origin accepted is looked up
def test_a_worker_attempt_with_a_bad_key(bad_key: SenderKey) -> None:
    row = ClaimedRow(
        1, 1, "https://remote.example/inbox", "remote.example", [], "outbox", "", 1, "t"
    )
    body = b"{}"
    message = MessageData(
        1,
        ACTOR,
        body,
        hashlib.sha256(body).digest(),
        "application/activity+json",
        None,
        "Create",
        False,
        16,
    )
    job = Job(row, message, bad_key, time.monotonic() + 60)
    error = raised_by(
        lambda: asyncio.run(perform(job, RecordingTransport(), MemoryBreakerStore(), None))
    )
    assert_no_key_material(error, bad_key)


@pytest.mark.django_db
def test_send_with_a_bad_key(bad_key: SenderKey) -> None:
    with (
        override_settings(OUTBOX_KEY_RESOLVER=resolver_returning(bad_key)),
        pytest.raises(InvalidSenderKey) as raised,
    ):
        outbox.send(ACTOR, ACTIVITY, ["https://remote.example/inbox"])
    assert_no_key_material(raised.value, bad_key)

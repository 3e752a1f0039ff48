"""A worker's attempt at a webhook: signed afresh each time, through the same breakers.

``perform`` runs here with the real transport against a loopback server, and
every signature is checked with the reference library (``v1``) or
``cryptography`` (``v1a``).  ``WorkerProcess.jobs_for`` resolves the secrets in
the task's thread, and refuses or retries what it cannot sign.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from django.test import override_settings

from django_outbox import outbox
from django_outbox.breakers import BreakerPolicy
from django_outbox.breakers.memory import MemoryBreakerStore
from django_outbox.models import Signing
from django_outbox.signing.webhooks import WebhookKeys, WebhookSecret
from django_outbox.store.claim_rows import new_token
from django_outbox.store.transitions import claim
from django_outbox.transport import Transport
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptResult, Outcome
from django_outbox.worker.attempt import Job, perform
from django_outbox.worker.process import WorkerProcess
from testproject.demo.keys import ACTOR
from testproject.demo.webhooks import OLD_SECRET, SECRET, SHOP, SIGNING_KEY
from testproject.inbox_servers import Behaviour, InboxServer
from tests.support.webhook_verifiers import verify_v1, verify_v1a

BODY = b'{"type":"invoice.paid","data":{"id":"in_1","total":"\xc3\xa9"}}'
WEBHOOK_ID = "msg_2ZkP9x7QvT1cY4mN8bR0sW3e"


def job(url: str, keys: WebhookKeys) -> Job:
    row = ClaimedRow(1, 1, url, "127.0.0.1", [], "outbox.priority", "", 1, "t")
    message = MessageData(
        1,
        SHOP,
        BODY,
        b"",
        "application/json",
        None,
        "invoice.paid",
        False,
        16,
        signing=Signing.STANDARD_WEBHOOKS.value,
        webhook_id=WEBHOOK_ID,
    )
    return Job(row, message, keys, time.monotonic() + 60)


def attempts(
    jobs: Sequence[Job],
    store: MemoryBreakerStore | None = None,
    policy: BreakerPolicy | None = None,
    pause: Callable[[], float] = lambda: 0.0,
) -> list[Outcome]:
    """``perform`` each job in turn on one event loop and transport, ``pause()`` s apart."""

    async def each() -> list[Outcome]:
        transport = Transport(user_agent="test", total_timeout=5, allowed_networks=["127.0.0.0/8"])
        breakers = store or MemoryBreakerStore()
        outcomes = []
        for index, attempt in enumerate(jobs):
            if index:
                await asyncio.sleep(pause())
            outcomes.append(await perform(attempt, transport, breakers, policy))
        transport.close()
        return outcomes

    return asyncio.run(each())


def test_a_webhook_attempt_is_signed_for_the_reference_verifier(
    inbox_server: InboxServer,
) -> None:
    [outcome] = attempts([job(inbox_server.url("/hook"), WebhookKeys(SECRET))])
    assert (outcome.result, outcome.status) == (AttemptResult.DELIVERED, 202)
    (request,) = inbox_server.requests()
    assert request.body == BODY
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["webhook-id"] == WEBHOOK_ID
    assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 5
    assert verify_v1(SECRET, request.body, request.headers) == {
        "type": "invoice.paid",
        "data": {"id": "in_1", "total": "é"},
    }
    for header in ("Signature", "Signature-Input", "Digest", "Content-Digest", "Date"):
        assert request.headers[header] is None


def test_every_secret_of_a_rotation_signs_and_ed25519_signs_v1a(
    inbox_server: InboxServer,
) -> None:
    keys = WebhookKeys(SECRET, OLD_SECRET, SIGNING_KEY)
    attempts([job(inbox_server.url("/hook"), keys)])
    (request,) = inbox_server.requests()
    schemes = [entry.split(",")[0] for entry in request.headers["webhook-signature"].split(" ")]
    assert schemes == ["v1", "v1", "v1a"]
    verify_v1(SECRET, request.body, request.headers)
    verify_v1(OLD_SECRET, request.body, request.headers)
    public = WebhookSecret(SIGNING_KEY).public_key
    assert public is not None and verify_v1a(public, request.body, request.headers)
    forged = {**dict(request.headers.items()), "webhook-id": "msg_other"}
    assert not verify_v1a(public, request.body, forged)


def test_each_attempt_has_a_fresh_timestamp_and_signature_and_the_same_id(
    inbox_server: InboxServer,
) -> None:
    inbox_server.behave("/hook", Behaviour(statuses=(500, 200)))
    attempt = job(inbox_server.url("/hook"), WebhookKeys(SECRET))
    outcomes = attempts([attempt, attempt], pause=lambda: 1.01 - time.time() % 1)
    assert [o.result for o in outcomes] == [AttemptResult.RETRY, AttemptResult.DELIVERED]
    first, second = inbox_server.requests()
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == WEBHOOK_ID
    assert int(second.headers["webhook-timestamp"]) > int(first.headers["webhook-timestamp"])
    assert first.headers["webhook-signature"] != second.headers["webhook-signature"]
    verify_v1(SECRET, first.body, first.headers)
    verify_v1(SECRET, second.body, second.headers)


@pytest.mark.parametrize(
    ("status", "result"),
    [
        (401, AttemptResult.RETRY),
        (400, AttemptResult.REFUSED),
        (410, AttemptResult.REFUSED),
        (301, AttemptResult.RETRY),
        (503, AttemptResult.RETRY),
    ],
)
def test_answers_are_judged_as_for_activities_with_no_second_knock(
    inbox_server: InboxServer, status: int, result: AttemptResult
) -> None:
    headers = {"Location": "https://elsewhere.example/"} if status == 301 else {}
    inbox_server.behave("/hook", Behaviour(statuses=(status,), headers=headers))
    [outcome] = attempts([job(inbox_server.url("/hook"), WebhookKeys(SECRET))])
    assert (outcome.result, outcome.status) == (result, status)
    assert len(inbox_server.requests()) == 1  # one request: no other scheme, no redirect


def test_retry_after_is_read_from_a_webhook_answer(inbox_server: InboxServer) -> None:
    inbox_server.behave("/hook", Behaviour(statuses=(429,), headers={"Retry-After": "120"}))
    [outcome] = attempts([job(inbox_server.url("/hook"), WebhookKeys(SECRET))])
    assert (outcome.result, outcome.retry_after) == (AttemptResult.RETRY, 120.0)


def test_a_failing_endpoint_opens_its_breaker_as_an_inbox_would(
    inbox_server: InboxServer,
) -> None:
    inbox_server.behave("/hook", Behaviour(statuses=(500,)))
    store, policy = MemoryBreakerStore(), BreakerPolicy(threshold=2, cool_off=60)
    attempt = job(inbox_server.url("/hook"), WebhookKeys(SECRET))
    results = [outcome.result for outcome in attempts([attempt] * 3, store, policy)]
    assert results == [AttemptResult.RETRY, AttemptResult.RETRY, AttemptResult.HELD]
    assert len(inbox_server.requests()) == 2


# The task's half: secrets resolved per endpoint, cached, refused or retried ----------


class Collected:
    """Stands in for the recorder: keeps the outcomes ``jobs_for`` records at once."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def put(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


@pytest.fixture
def process() -> Iterator[WorkerProcess]:
    with override_settings(OUTBOX_BREAKER_CACHE=None):
        worker = WorkerProcess()
    recorder = worker.recorder
    yield worker
    worker.recorder = recorder
    worker.stop(1)


@pytest.mark.django_db
def test_jobs_carry_the_endpoints_secrets_asked_once_a_minute(
    process: WorkerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, str]] = []
    answers: dict[str, Any] = {"/a": SECRET, "/b": [SECRET, OLD_SECRET]}

    def resolver(sender: str, endpoint: str) -> Any:
        asked.append((sender, endpoint))
        return answers[endpoint.removeprefix("https://hooks.example")]

    endpoints = ["https://hooks.example/a", "https://hooks.example/b"]
    with override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=resolver, OUTBOX_KEY_RESOLVER=None):
        message = outbox.send_webhook(SHOP, {"type": "t"}, endpoints)
        assert message is not None
        asked.clear()
        ids = list(message.deliveries.order_by("id").values_list("id", flat=True))
        jobs = process.jobs_for(claim(ids, new_token()))
        assert [len(j.key.secrets) for j in jobs if isinstance(j.key, WebhookKeys)] == [1, 2]
        assert [j.message.webhook_id for j in jobs] == [message.webhook_id] * 2
        # Asked concurrently: in either order.
        assert sorted(asked) == [(SHOP, endpoints[0]), (SHOP, endpoints[1])]
        process.webhook_keys_for(SHOP, endpoints[0])
        assert len(asked) == 2  # cached
        clock = time.monotonic() + 61
        monkeypatch.setattr("django_outbox.worker.process.time.monotonic", lambda: clock)
        process.webhook_keys_for(SHOP, endpoints[0])
        assert len(asked) == 3  # asked again after a minute


@pytest.mark.django_db
def test_a_secret_gone_is_refused_and_an_unusable_one_retried(process: WorkerProcess) -> None:
    answers: dict[str, Any] = {"/a": SECRET, "/b": SECRET, "/c": SECRET}

    def resolver(sender: str, endpoint: str) -> Any:
        return answers[endpoint.removeprefix("https://hooks.example")]

    collected = Collected()
    process.recorder = collected  # type: ignore[assignment]
    endpoints = [f"https://hooks.example/{name}" for name in "abc"]
    with override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=resolver):
        message = outbox.send_webhook(SHOP, {"type": "t"}, endpoints)
        activity = outbox.send(ACTOR, {"type": "Note"}, ["https://social.example/inbox"])
        assert message is not None and activity is not None
        answers.update({"/b": None, "/c": "whsec_c2hvcnQ="})
        ids = [*message.deliveries.values_list("id", flat=True), activity.deliveries.get().pk]
        jobs = process.jobs_for(claim(sorted(ids), new_token()))
    assert [job.row.inbox for job in jobs] == [endpoints[0], "https://social.example/inbox"]
    refused, retried = sorted(collected.outcomes, key=lambda outcome: outcome.row.inbox)
    assert (refused.row.inbox, refused.result) == (endpoints[1], AttemptResult.REFUSED)
    assert refused.error == f"the webhook secret resolver no longer has a secret for {endpoints[1]}"
    assert (retried.row.inbox, retried.result) == (endpoints[2], AttemptResult.RETRY)
    assert retried.error.startswith("internal: unusable webhook secret: webhook secret 1 of 1")
    assert "c2hvcnQ" not in retried.error

"""Webhook settings: the resolver's answers, and the admin (checks: tests/unit/test_checks.py)."""

from __future__ import annotations

import base64

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from django_outbox import WebhookKeys, outbox
from django_outbox.models import Signing
from django_outbox.signing.webhooks import InvalidWebhookSecret, WebhookSecret, as_webhook_keys
from testproject.demo.keys import ACTOR
from testproject.demo.webhooks import OLD_SECRET, SECRET, SHOP, SIGNING_KEY
from tests.support.webhook_samples import needles, shown_anywhere

HIDDEN = "whsec_" + base64.b64encode(b"never shown anywhere, not once!!").decode()


def test_a_resolver_may_answer_keys_one_secret_or_several() -> None:
    keys = WebhookKeys(SECRET)
    assert as_webhook_keys(keys) is keys
    assert as_webhook_keys(None) is None
    assert [s.scheme for s in as_webhook_keys(SECRET).secrets] == ["v1"]  # type: ignore[union-attr]
    several = as_webhook_keys([SECRET, OLD_SECRET, WebhookSecret(SIGNING_KEY)])
    assert several is not None and [s.scheme for s in several.secrets] == ["v1", "v1", "v1a"]
    assert as_webhook_keys((SIGNING_KEY,)).secrets[0].public_key  # type: ignore[union-attr]


@pytest.mark.parametrize("answer", [b"whsec_abc", {"secret": SECRET}, 42, [], [SECRET, 42]])
def test_other_answers_are_refused(answer: object) -> None:
    with pytest.raises(InvalidWebhookSecret):
        as_webhook_keys(answer)


def _send_error(holder: list[str]) -> InvalidWebhookSecret:
    """The error of a send whose resolver answers the secret popped from ``holder``.

    The secret is popped inside the resolver, so that this frame (the first of
    the error's traceback) does not hold it either.
    """

    def resolver(sender: str, endpoint: str) -> str:
        return holder.pop()

    with override_settings(OUTBOX_WEBHOOK_SECRET_RESOLVER=resolver):
        try:
            outbox.send_webhook(SHOP, {"type": "t"}, ["https://hooks.example/in"])
        except InvalidWebhookSecret as error:
            return error
    raise AssertionError("the secret was accepted")


@pytest.mark.django_db
def test_a_malformed_secret_is_shown_nowhere_in_the_error_of_a_send() -> None:
    malformed = HIDDEN[:-3] + "*"
    assert shown_anywhere(_send_error([malformed]), needles(malformed)) == []


@pytest.mark.django_db
def test_the_admin_tells_webhooks_from_activities_and_finds_a_webhook_id(
    admin_client: Client,
) -> None:
    hook = outbox.send_webhook(SHOP, {"type": "invoice.paid"}, ["https://hooks.example/in"])
    note = outbox.send(ACTOR, {"type": "Note"}, ["https://social.example/inbox"])
    assert hook is not None and note is not None
    messages = reverse("admin:django_outbox_message_changelist")
    page = admin_client.get(messages, {"signing": Signing.STANDARD_WEBHOOKS})
    assert page.status_code == 200
    assert list(page.context["cl"].result_list) == [hook]
    found = admin_client.get(messages, {"q": hook.webhook_id})
    assert list(found.context["cl"].result_list) == [hook]
    deliveries = reverse("admin:django_outbox_delivery_changelist")
    page = admin_client.get(deliveries, {"message__signing": Signing.HTTP_SIGNATURES})
    assert [row.inbox for row in page.context["cl"].result_list] == ["https://social.example/inbox"]
    detail = admin_client.get(reverse("admin:django_outbox_message_change", args=[hook.pk]))
    assert hook.webhook_id.encode() in detail.content

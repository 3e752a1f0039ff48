"""Webhook secrets: the forms accepted, and every refusal a typed error that shows no secret
(not in its message, its arguments, or the frames of its traceback)."""

from __future__ import annotations

import pickle

import pytest
from standardwebhooks.webhooks import Webhook

from django_outbox.exceptions import InvalidSend
from django_outbox.signing.webhooks import (
    InvalidWebhookMessage,
    InvalidWebhookSecret,
    WebhookKeys,
    WebhookSecret,
    sign_webhook,
)
from tests.support.webhook_samples import (
    BODY,
    SECRET_A,
    SECRET_B,
    SECRET_C,
    SEED,
    SEED_AND_PUBLIC,
    SIGNING_KEY,
    b64,
    ed25519_verify,
    needles,
    shown_anywhere,
)


@pytest.mark.parametrize(
    ("text", "scheme"),
    [
        pytest.param(SECRET_B, "v1", id="24 bytes"),
        pytest.param(SECRET_C, "v1", id="64 bytes"),
        pytest.param("whsec_" + b64(b"x" * 25).rstrip("="), "v1", id="unpadded"),
        pytest.param(SIGNING_KEY, "v1a", id="32-byte seed"),
        pytest.param("whsk_" + b64(SEED_AND_PUBLIC), "v1a", id="64-byte seed and public key"),
    ],
)
def test_good_secrets_are_accepted(text: str, scheme: str) -> None:
    assert WebhookSecret(text).scheme == scheme
    headers = sign_webhook(WebhookKeys(text), "msg_ok", BODY)
    if scheme == "v1":
        Webhook(text).verify(BODY, headers)
    else:
        ed25519_verify(SEED, headers, BODY)


def test_the_unpadded_and_padded_forms_sign_alike() -> None:
    padded = "whsec_" + b64(b"x" * 25)
    assert padded.endswith("=")
    one = sign_webhook(WebhookKeys(padded), "msg_p", BODY, 1)
    two = sign_webhook(WebhookKeys(padded.rstrip("=")), "msg_p", BODY, 1)
    assert one == two


BAD_SECRETS = [
    pytest.param("", "must start with whsec_ or whsk_", id="empty"),
    pytest.param("whsec_", "hold 24 to 64 bytes, this one holds 0", id="empty after prefix"),
    pytest.param("whsec_" + b64(b"s" * 23), "this one holds 23", id="too short"),
    pytest.param("whsec_" + b64(b"s" * 65), "this one holds 65", id="too long"),
    pytest.param("whsec_!!notbase64!!notbase64!!notbase64", "must be base64", id="not base64"),
    pytest.param("whsec_" + b64(b"s" * 24)[:-1], "this one holds 23", id="truncated base64"),
    pytest.param("whsec_" + b64(b"s" * 24) + "A", "must be base64", id="one char too many"),
    pytest.param("whsec_" + "-_" * 16, "must be base64", id="url-safe alphabet"),
    pytest.param("whsec_" + b64(b"s" * 30) + "==", "must be base64", id="extra padding"),
    pytest.param("whsec" + b64(b"s" * 32), "must start with", id="no underscore"),
    pytest.param("WHSEC_" + b64(b"s" * 32), "must start with", id="upper-case prefix"),
    pytest.param(b64(b"s" * 32), "must start with", id="no prefix"),
    pytest.param(" whsec_" + b64(b"s" * 32), "must start with", id="leading blank"),
    pytest.param("whsec_" + b64(b"s" * 32) + "\n", "must be base64", id="trailing newline"),
    pytest.param(
        "whsec_" + b64(b"s" * 32)[:20] + " " + b64(b"s" * 32)[20:],
        "must be base64",
        id="inner blank",
    ),
    pytest.param("whsk_" + b64(b"k" * 31), "32 or 64 bytes, this one holds 31", id="short key"),
    pytest.param("whsk_" + b64(SEED + bytes(32)), "does not match", id="wrong public half"),
    pytest.param("whpk_" + b64(b"p" * 32), "public key verifies", id="public key"),
]


def _secret_error(holder: list[object]) -> InvalidWebhookSecret:
    """The error for the secret popped from ``holder``, raised and caught here.

    The secret is popped inside the call, so that this frame (the first of the
    error's traceback) does not hold it either.
    """
    try:
        WebhookSecret(holder.pop())  # type: ignore[arg-type]
    except InvalidWebhookSecret as error:
        return error
    raise AssertionError("the secret was accepted")


def _keys_error(holder: list[str]) -> InvalidWebhookSecret:
    try:
        WebhookKeys(holder.pop(), holder.pop())
    except InvalidWebhookSecret as error:
        return error
    raise AssertionError("the secrets were accepted")


@pytest.mark.parametrize(("text", "message"), BAD_SECRETS)
def test_bad_secrets_raise_a_typed_error_showing_no_secret(text: str, message: str) -> None:
    error = _secret_error([text])
    assert isinstance(error, InvalidSend)
    assert isinstance(error, ValueError)
    assert message in str(error)
    assert error.__cause__ is None
    assert error.__context__ is None
    assert shown_anywhere(error, needles(text)) == []


@pytest.mark.parametrize(("text", "message"), BAD_SECRETS)
def test_a_bad_secret_among_keys_names_its_position_and_shows_no_secret(
    text: str, message: str
) -> None:
    error = _keys_error([text, SECRET_A])  # popped: SECRET_A first, then the bad one
    assert str(error).startswith("webhook secret 2 of 2: ")
    assert message in str(error)
    assert shown_anywhere(error, needles(text) + needles(SECRET_A)) == []


@pytest.mark.parametrize("value", [None, b"whsec_" + b"QUFB" * 8, 42])
def test_a_secret_that_is_not_a_string_is_refused(value: object) -> None:
    assert "must be a string" in str(_secret_error([value]))
    with pytest.raises(InvalidWebhookSecret, match="1 of 1: a webhook secret must be a string"):
        WebhookKeys(value)  # type: ignore[arg-type]


def test_keys_need_a_secret() -> None:
    with pytest.raises(InvalidWebhookSecret, match="at least one secret"):
        WebhookKeys()


def test_a_good_secret_shows_nowhere() -> None:
    keys = WebhookKeys(SECRET_A, WebhookSecret(SIGNING_KEY))
    shown = " ".join((repr(keys), str(keys), repr(keys.secrets), str(keys.secrets[0])))
    for needle in needles(SECRET_A) + needles(SIGNING_KEY):
        assert needle not in shown
    assert repr(keys.secrets[0]) == "WebhookSecret(scheme='v1')"
    assert repr(keys.secrets[1]).startswith("WebhookSecret(scheme='v1a', public_key='whpk_")


def _signing_error(holder: list[str]) -> InvalidWebhookMessage:
    try:
        sign_webhook(WebhookKeys(holder.pop()), "bad.id", BODY)
    except InvalidWebhookMessage as error:
        return error
    raise AssertionError("the id was accepted")


def test_a_signing_error_shows_no_secret_in_its_frames() -> None:
    error = _signing_error([SECRET_A])
    assert shown_anywhere(error, needles(SECRET_A)) == []


def test_secrets_are_not_pickled() -> None:
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(WebhookSecret(SECRET_A))
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(WebhookKeys(SECRET_A))

"""Standard Webhooks signing, checked with the reference verifier.

``standardwebhooks`` (the specification's own Python library) verifies ``v1``
signatures; it ignores ``v1a`` and cannot take a body that is not UTF-8, so
those are checked with ``cryptography`` and ``hmac`` directly, and against the
known answers of the reference libraries' own tests.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import pickle
import time
import traceback
from datetime import datetime, tzinfo
from unittest import mock

import pytest
import standardwebhooks.webhooks
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from django_outbox.exceptions import InvalidSend
from django_outbox.signing.webhooks import (
    MAX_TIMESTAMP,
    InvalidWebhookMessage,
    InvalidWebhookSecret,
    WebhookKeys,
    WebhookSecret,
    check_webhook_id,
    new_signing_key,
    new_symmetric_secret,
    new_webhook_id,
    sign_webhook,
)

# Known answers from the reference libraries' tests (Python for v1, Go for v1a).
KNOWN_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
KNOWN_TIMESTAMP = 1614265330
KNOWN_BODY = b'{"test": 2432232314}'
KNOWN_V1_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
KNOWN_V1 = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
KNOWN_V1A_SECRET = "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
KNOWN_V1A = (
    "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="
)

SEED = bytes(range(32))
SEED_AND_PUBLIC = SEED + Ed25519PrivateKey.from_private_bytes(SEED).public_key().public_bytes_raw()
SIGNING_KEY = "whsk_" + base64.b64encode(SEED).decode()
SECRET_A = "whsec_" + base64.b64encode(b"A" * 32).decode()
SECRET_B = "whsec_" + base64.b64encode(b"B" * 24).decode()
SECRET_C = "whsec_" + base64.b64encode(b"C" * 64).decode()
BODY = b'{"type":"invoice.paid","data":{"id":"in_1","amount":"\xc3\xa9"}}'


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def reference_verify(secret: str, body: bytes, headers: dict[str, str]) -> None:
    """Verify with ``standardwebhooks``, its clock set to the signed timestamp."""
    signed_at = int(headers["webhook-timestamp"])

    class Clock(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Clock:
            return cls.fromtimestamp(signed_at, tz)

    with mock.patch.object(standardwebhooks.webhooks, "datetime", Clock):
        Webhook(secret).verify(body, headers, json_parse=False)


def signatures(headers: dict[str, str], scheme: str) -> list[bytes]:
    """The decoded signatures of one scheme in a ``webhook-signature`` header."""
    found = []
    for item in headers["webhook-signature"].split(" "):
        version, _, value = item.partition(",")
        if version == scheme:
            found.append(base64.b64decode(value, validate=True))
    return found


def signed_content(headers: dict[str, str], body: bytes) -> bytes:
    return f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body


def ed25519_verify(seed: bytes, headers: dict[str, str], body: bytes) -> None:
    """Verify the first v1a signature with the public key of ``seed``."""
    (signature,) = signatures(headers, "v1a")[:1]
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    public.verify(signature, signed_content(headers, body))


def hmac_verify(key: bytes, headers: dict[str, str], body: bytes) -> bool:
    expected = hmac.new(key, signed_content(headers, body), hashlib.sha256).digest()
    return any(hmac.compare_digest(expected, sig) for sig in signatures(headers, "v1"))


# Known answers ------------------------------------------------------------------


def test_v1_matches_the_reference_known_answer() -> None:
    headers = sign_webhook(WebhookKeys(KNOWN_V1_SECRET), KNOWN_ID, KNOWN_BODY, KNOWN_TIMESTAMP)
    assert headers == {
        "webhook-id": KNOWN_ID,
        "webhook-timestamp": str(KNOWN_TIMESTAMP),
        "webhook-signature": KNOWN_V1,
        "Content-Type": "application/json",
    }


def test_v1a_matches_the_reference_known_answer() -> None:
    headers = sign_webhook(WebhookKeys(KNOWN_V1A_SECRET), KNOWN_ID, KNOWN_BODY, KNOWN_TIMESTAMP)
    assert headers["webhook-signature"] == KNOWN_V1A


# Verification by the reference library -------------------------------------------


def test_a_fresh_signature_verifies_with_the_reference_library_now() -> None:
    headers = sign_webhook(WebhookKeys(SECRET_A), "msg_1", BODY)
    assert abs(int(headers["webhook-timestamp"]) - time.time()) <= 2
    Webhook(SECRET_A).verify(BODY, headers)  # its real clock
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET_B).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET_A).verify(BODY + b" ", headers)


def test_a_re_sign_later_keeps_the_id_and_changes_timestamp_and_signature() -> None:
    keys = WebhookKeys(SECRET_A)
    now = int(time.time())
    first = sign_webhook(keys, "msg_42_7", BODY, now - 90)
    again = sign_webhook(keys, "msg_42_7", BODY, now)
    assert again["webhook-id"] == first["webhook-id"] == "msg_42_7"
    assert again["webhook-timestamp"] != first["webhook-timestamp"]
    assert again["webhook-signature"] != first["webhook-signature"]
    Webhook(SECRET_A).verify(BODY, first)
    Webhook(SECRET_A).verify(BODY, again)


def test_a_rotation_signs_with_every_secret_and_either_verifies() -> None:
    headers = sign_webhook(WebhookKeys(SECRET_A, SECRET_B), "msg_rot", BODY)
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(SECRET_A).verify(BODY, headers)
    Webhook(SECRET_B).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET_C).verify(BODY, headers)


def test_symmetric_and_asymmetric_secrets_sign_together() -> None:
    keys = WebhookKeys(SECRET_A, SIGNING_KEY)
    headers = sign_webhook(keys, "msg_mixed", BODY)
    assert [item.split(",")[0] for item in headers["webhook-signature"].split(" ")] == [
        "v1",
        "v1a",
    ]
    Webhook(SECRET_A).verify(BODY, headers)  # skips the v1a signature
    ed25519_verify(SEED, headers, BODY)


def test_the_reference_library_ignores_v1a_so_v1a_is_checked_with_cryptography() -> None:
    headers = sign_webhook(WebhookKeys(SIGNING_KEY), "msg_a", BODY)
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(SECRET_A).verify(BODY, headers)
    ed25519_verify(SEED, headers, BODY)
    other_seed = bytes(32)
    with pytest.raises(InvalidSignature):
        ed25519_verify(other_seed, headers, BODY)
    with pytest.raises(InvalidSignature):
        ed25519_verify(SEED, headers, BODY + b"x")


def test_the_public_key_is_the_whpk_text_of_the_seeds_public_key() -> None:
    public = Ed25519PrivateKey.from_private_bytes(SEED).public_key().public_bytes_raw()
    secret = WebhookSecret(SIGNING_KEY)
    assert secret.scheme == "v1a"
    assert secret.public_key == "whpk_" + _b64(public)
    headers = sign_webhook(WebhookKeys(secret), "msg_pk", BODY)
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(secret.public_key[5:]))
    key.verify(signatures(headers, "v1a")[0], signed_content(headers, BODY))
    assert WebhookSecret(SECRET_A).public_key is None


ids = st.from_regex(r"[A-Za-z0-9_-]{1,255}", fullmatch=True)
timestamps = st.integers(min_value=0, max_value=MAX_TIMESTAMP - 600)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=4096), msg_id=ids, timestamp=timestamps)
def test_any_body_id_and_timestamp_verify(body: bytes, msg_id: str, timestamp: int) -> None:
    headers = sign_webhook(WebhookKeys(SECRET_B, SIGNING_KEY), msg_id, body, timestamp)
    assert headers["webhook-id"] == msg_id
    assert headers["webhook-timestamp"] == str(timestamp)
    assert hmac_verify(base64.b64decode(SECRET_B[6:]), headers, body)
    ed25519_verify(SEED, headers, body)
    try:
        body.decode()
    except UnicodeDecodeError:
        return  # the reference library decodes the body as UTF-8 before verifying
    reference_verify(SECRET_B, body, headers)


def test_the_largest_timestamp_signs() -> None:
    headers = sign_webhook(WebhookKeys(SECRET_C), "msg_late", BODY, MAX_TIMESTAMP)
    assert hmac_verify(b"C" * 64, headers, BODY)


# Secrets accepted and refused ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scheme"),
    [
        pytest.param(SECRET_B, "v1", id="24 bytes"),
        pytest.param(SECRET_C, "v1", id="64 bytes"),
        pytest.param("whsec_" + _b64(b"x" * 25).rstrip("="), "v1", id="unpadded"),
        pytest.param(SIGNING_KEY, "v1a", id="32-byte seed"),
        pytest.param("whsk_" + _b64(SEED_AND_PUBLIC), "v1a", id="64-byte seed and public key"),
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
    padded = "whsec_" + _b64(b"x" * 25)
    assert padded.endswith("=")
    one = sign_webhook(WebhookKeys(padded), "msg_p", BODY, 1)
    two = sign_webhook(WebhookKeys(padded.rstrip("=")), "msg_p", BODY, 1)
    assert one == two


BAD_SECRETS = [
    pytest.param("", "must start with whsec_ or whsk_", id="empty"),
    pytest.param("whsec_", "hold 24 to 64 bytes, this one holds 0", id="empty after prefix"),
    pytest.param("whsec_" + _b64(b"s" * 23), "this one holds 23", id="too short"),
    pytest.param("whsec_" + _b64(b"s" * 65), "this one holds 65", id="too long"),
    pytest.param("whsec_!!notbase64!!notbase64!!notbase64", "must be base64", id="not base64"),
    pytest.param("whsec_" + _b64(b"s" * 24)[:-1], "this one holds 23", id="truncated base64"),
    pytest.param("whsec_" + _b64(b"s" * 24) + "A", "must be base64", id="one char too many"),
    pytest.param("whsec_" + "-_" * 16, "must be base64", id="url-safe alphabet"),
    pytest.param("whsec_" + _b64(b"s" * 30) + "==", "must be base64", id="extra padding"),
    pytest.param("whsec" + _b64(b"s" * 32), "must start with", id="no underscore"),
    pytest.param("WHSEC_" + _b64(b"s" * 32), "must start with", id="upper-case prefix"),
    pytest.param(_b64(b"s" * 32), "must start with", id="no prefix"),
    pytest.param(" whsec_" + _b64(b"s" * 32), "must start with", id="leading blank"),
    pytest.param("whsec_" + _b64(b"s" * 32) + "\n", "must be base64", id="trailing newline"),
    pytest.param(
        "whsec_" + _b64(b"s" * 32)[:20] + " " + _b64(b"s" * 32)[20:],
        "must be base64",
        id="inner blank",
    ),
    pytest.param("whsk_" + _b64(b"k" * 31), "32 or 64 bytes, this one holds 31", id="short key"),
    pytest.param("whsk_" + _b64(SEED + bytes(32)), "does not match", id="wrong public half"),
    pytest.param("whpk_" + _b64(b"p" * 32), "public key verifies", id="public key"),
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


def _shown_anywhere(error: BaseException, needles: list[str]) -> list[str]:
    """Which needles appear in the error's text, args, chain or frame locals."""
    rendered = "".join(
        traceback.TracebackException.from_exception(error, capture_locals=True).format()
    )
    texts = [str(error), repr(error), repr(error.args), rendered]
    tb = error.__traceback__
    while tb is not None:
        texts.extend(repr(value) for value in tb.tb_frame.f_locals.values())
        tb = tb.tb_next
    return [needle for needle in needles if any(needle in text for text in texts)]


def _needles(text: str) -> list[str]:
    """The forms a secret could show in: the text, its base64 part, its bytes."""
    found = [text] if len(text) >= 8 else []
    body = text.partition("_")[2].strip()
    if len(body) >= 8:
        found.append(body)
        try:
            raw = base64.b64decode(body + "==")
        except ValueError:
            return found
        if raw:
            found.extend((repr(raw), raw.hex()))
    return found


@pytest.mark.parametrize(("text", "message"), BAD_SECRETS)
def test_bad_secrets_raise_a_typed_error_showing_no_secret(text: str, message: str) -> None:
    error = _secret_error([text])
    assert isinstance(error, InvalidSend)
    assert isinstance(error, ValueError)
    assert message in str(error)
    assert error.__cause__ is None
    assert error.__context__ is None
    assert _shown_anywhere(error, _needles(text)) == []


@pytest.mark.parametrize(("text", "message"), BAD_SECRETS)
def test_a_bad_secret_among_keys_names_its_position_and_shows_no_secret(
    text: str, message: str
) -> None:
    error = _keys_error([text, SECRET_A])  # popped: SECRET_A first, then the bad one
    assert str(error).startswith("webhook secret 2 of 2: ")
    assert message in str(error)
    assert _shown_anywhere(error, _needles(text) + _needles(SECRET_A)) == []


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
    for needle in _needles(SECRET_A) + _needles(SIGNING_KEY):
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
    assert _shown_anywhere(error, _needles(SECRET_A)) == []


def test_secrets_are_not_pickled() -> None:
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(WebhookSecret(SECRET_A))
    with pytest.raises(TypeError, match="not pickled"):
        pickle.dumps(WebhookKeys(SECRET_A))


# Ids, timestamps and bodies refused ---------------------------------------------


@pytest.mark.parametrize(
    "msg_id",
    ["", "msg.1", "msg 1", "msg,1", "msg_\u00e9", "msg\n1", "a" * 256, None, 7],
)
def test_ids_that_cannot_be_signed_are_refused(msg_id: object) -> None:
    with pytest.raises(InvalidWebhookMessage, match="webhook id"):
        check_webhook_id(msg_id)  # type: ignore[arg-type]
    with pytest.raises(InvalidWebhookMessage, match="webhook id"):
        sign_webhook(WebhookKeys(SECRET_A), msg_id, BODY)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "msg_id", ["msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "1f81eb52-5198-4599-803e-771906343485", "a" * 255]
)
def test_usual_ids_are_accepted(msg_id: str) -> None:
    check_webhook_id(msg_id)


@pytest.mark.parametrize("timestamp", [-1, MAX_TIMESTAMP + 1, True, 1.5, "1614265330"])
def test_timestamps_that_are_not_unix_seconds_are_refused(timestamp: object) -> None:
    with pytest.raises(InvalidWebhookMessage, match="Unix seconds"):
        sign_webhook(WebhookKeys(SECRET_A), "msg_1", BODY, timestamp)  # type: ignore[arg-type]


@pytest.mark.parametrize("body", ["{}", bytearray(b"{}"), None])
def test_a_body_that_is_not_bytes_is_refused(body: object) -> None:
    with pytest.raises(InvalidWebhookMessage, match="must be bytes"):
        sign_webhook(WebhookKeys(SECRET_A), "msg_1", body)  # type: ignore[arg-type]


def test_the_content_type_is_sent_as_given_and_must_be_a_header_value() -> None:
    headers = sign_webhook(
        WebhookKeys(SECRET_A), "msg_1", BODY, content_type="application/cloudevents+json"
    )
    assert headers["Content-Type"] == "application/cloudevents+json"
    with pytest.raises(InvalidWebhookMessage, match="content type"):
        sign_webhook(WebhookKeys(SECRET_A), "msg_1", BODY, content_type="a\r\nX-Evil: 1")


# Generators -------------------------------------------------------------------


def test_new_ids_are_signable_and_distinct() -> None:
    made = {new_webhook_id() for _ in range(1000)}
    assert len(made) == 1000
    for msg_id in made:
        assert msg_id.startswith("msg_")
        assert len(msg_id) == 28
        sign_webhook(WebhookKeys(SECRET_A), msg_id, BODY)


def test_new_secrets_parse_to_their_scheme() -> None:
    symmetric = new_symmetric_secret()
    assert len(base64.b64decode(symmetric[6:])) == 32
    assert WebhookSecret(symmetric).scheme == "v1"
    assert WebhookSecret(new_symmetric_secret(24)).scheme == "v1"
    with pytest.raises(ValueError, match="24 to 64"):
        new_symmetric_secret(16)
    signing = new_signing_key()
    assert WebhookSecret(signing).scheme == "v1a"
    assert signing != new_signing_key()

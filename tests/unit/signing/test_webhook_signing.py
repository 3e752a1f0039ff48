"""Standard Webhooks signing, checked with the reference verifier.

``standardwebhooks`` (the specification's own Python library) verifies ``v1``
signatures; it ignores ``v1a`` and cannot take a body that is not UTF-8, so
those are checked with ``cryptography`` and ``hmac`` directly, and against the
known answers of the reference libraries' own tests.
"""

from __future__ import annotations

import base64
import time
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

from django_outbox.signing.webhooks import (
    MAX_TIMESTAMP,
    InvalidWebhookMessage,
    WebhookKeys,
    WebhookSecret,
    check_webhook_id,
    new_signing_key,
    new_symmetric_secret,
    new_webhook_id,
    sign_webhook,
)
from tests.support.webhook_samples import (
    BODY,
    SECRET_A,
    SECRET_B,
    SECRET_C,
    SEED,
    SIGNING_KEY,
    b64,
    ed25519_verify,
    hmac_verify,
    signatures,
    signed_content,
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


def reference_verify(secret: str, body: bytes, headers: dict[str, str]) -> None:
    """Verify with ``standardwebhooks``, its clock set to the signed timestamp."""
    signed_at = int(headers["webhook-timestamp"])

    class Clock(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Clock:
            return cls.fromtimestamp(signed_at, tz)

    with mock.patch.object(standardwebhooks.webhooks, "datetime", Clock):
        Webhook(secret).verify(body, headers, json_parse=False)


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
    assert secret.public_key == "whpk_" + b64(public)
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

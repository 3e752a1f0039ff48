"""What the webhook signing tests share: secrets, a body, independent verifiers
(``cryptography`` and ``hmac``), and the search for a secret shown in an error."""

from __future__ import annotations

import base64
import hashlib
import hmac
import traceback

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SEED = bytes(range(32))
SEED_AND_PUBLIC = SEED + Ed25519PrivateKey.from_private_bytes(SEED).public_key().public_bytes_raw()
SIGNING_KEY = "whsk_" + base64.b64encode(SEED).decode()
SECRET_A = "whsec_" + base64.b64encode(b"A" * 32).decode()
SECRET_B = "whsec_" + base64.b64encode(b"B" * 24).decode()
SECRET_C = "whsec_" + base64.b64encode(b"C" * 64).decode()
BODY = b'{"type":"invoice.paid","data":{"id":"in_1","amount":"\xc3\xa9"}}'


def b64(data: bytes) -> str:
    """``data`` in standard base64, as secrets are written."""
    return base64.b64encode(data).decode()


def signatures(headers: dict[str, str], scheme: str) -> list[bytes]:
    """The decoded signatures of one scheme in a ``webhook-signature`` header."""
    found = []
    for item in headers["webhook-signature"].split(" "):
        version, _, value = item.partition(",")
        if version == scheme:
            found.append(base64.b64decode(value, validate=True))
    return found


def signed_content(headers: dict[str, str], body: bytes) -> bytes:
    """What Standard Webhooks signs: ``id.timestamp.body``."""
    return f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body


def ed25519_verify(seed: bytes, headers: dict[str, str], body: bytes) -> None:
    """Verify the first v1a signature with the public key of ``seed``."""
    (signature,) = signatures(headers, "v1a")[:1]
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    public.verify(signature, signed_content(headers, body))


def hmac_verify(key: bytes, headers: dict[str, str], body: bytes) -> bool:
    """Whether a v1 signature in ``headers`` is the HMAC-SHA256 of the content by ``key``."""
    expected = hmac.new(key, signed_content(headers, body), hashlib.sha256).digest()
    return any(hmac.compare_digest(expected, sig) for sig in signatures(headers, "v1"))


def shown_anywhere(error: BaseException, needles: list[str]) -> list[str]:
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


def needles(text: str) -> list[str]:
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

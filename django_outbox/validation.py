"""Checks ``outbox.send`` runs before it writes anything.

Each check raises a subclass of :class:`~django_outbox.exceptions.InvalidSend`
naming what is wrong, so a view can turn it into a 400 without guessing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django_outbox.exceptions import (
    BodyTooLarge,
    InvalidActivity,
    InvalidBatch,
    InvalidInbox,
    UnknownSender,
)

_SCHEMES = frozenset(("http", "https"))


def inbox_host(inbox: str) -> str:
    """The host of an inbox URL that :func:`clean_inboxes` accepted."""
    return urlsplit(inbox).hostname or ""


def clean_inboxes(inboxes: Iterable[str]) -> list[str]:
    """The inboxes, de-duplicated in their first order, each checked.

    An inbox must be an absolute ``http`` or ``https`` URL with a host, no
    user name or password, and no fragment.
    """
    if isinstance(inboxes, str | bytes):
        raise InvalidInbox("inboxes must be a list of URLs, not a single string")
    seen: dict[str, None] = {}
    for inbox in inboxes:
        if inbox in seen:
            continue
        _check_inbox(inbox)
        seen[inbox] = None
    return list(seen)


def _check_inbox(inbox: object) -> None:
    if not isinstance(inbox, str):
        raise InvalidInbox(f"inbox {inbox!r} is not a string")
    try:
        parts = urlsplit(inbox)
        port = parts.port
    except ValueError as error:
        raise InvalidInbox(f"inbox {inbox!r} is not a valid URL: {error}") from None
    if parts.scheme not in _SCHEMES:
        raise InvalidInbox(f"inbox {inbox!r} is not an absolute http(s) URL")
    if not parts.hostname:
        raise InvalidInbox(f"inbox {inbox!r} has no host")
    if "@" in parts.netloc:
        raise InvalidInbox(f"inbox {inbox!r} carries credentials")
    if parts.fragment or inbox.endswith("#"):
        raise InvalidInbox(f"inbox {inbox!r} has a fragment")
    if port == 0 or any(c in inbox for c in " \t\r\n"):
        raise InvalidInbox(f"inbox {inbox!r} is not a valid URL")


def serialise_activity(activity: object, max_bytes: int) -> bytes:
    """The exact bytes to send for ``activity``: compact UTF-8 JSON."""
    if not isinstance(activity, Mapping):
        raise InvalidActivity(f"the activity must be a JSON object, not {type(activity).__name__}")
    try:
        body = json.dumps(
            activity, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode()
    except (TypeError, ValueError) as error:
        raise InvalidActivity(f"the activity cannot be serialised to JSON: {error}") from None
    if len(body) > max_bytes:
        raise BodyTooLarge(f"the activity is {len(body)} bytes; the limit is {max_bytes}")
    return body


def activity_type(activity: Mapping[str, Any]) -> str:
    """The activity's ``type`` as a short string, for admin and skip predicates."""
    kind = activity.get("type", "")
    if isinstance(kind, list):
        kind = kind[0] if kind else ""
    return str(kind)[:100]


def actor_id(actor: object) -> str:
    """The id an actor is signed as: a string as it is, or a model's id attribute.

    Objects are asked, in order, for ``actor_id``, ``ap_id``, ``actor_uri``,
    ``remote_id`` and ``uri`` (Takahē, BookWyrm and Mastodon-style names).
    """
    if isinstance(actor, str):
        if actor:
            return actor
        raise UnknownSender("the actor is an empty string")
    for name in ("actor_id", "ap_id", "actor_uri", "remote_id", "uri"):
        value = getattr(actor, name, None)
        if isinstance(value, str) and value:
            return value
    raise UnknownSender(f"cannot tell the actor id of {actor!r}; pass its id as a string")


def check_batch_options(
    tag: str | None, deadline: datetime | None, ordering_key: str | None, max_attempts: int | None
) -> None:
    """Refuse batch options that could not be stored or honoured."""
    if tag is not None and (not isinstance(tag, str) or len(tag) > 200):
        raise InvalidBatch("a batch tag must be a string of at most 200 characters")
    if ordering_key is not None and (not isinstance(ordering_key, str) or len(ordering_key) > 500):
        raise InvalidBatch("an ordering key must be a string of at most 500 characters")
    if deadline is not None and (not isinstance(deadline, datetime) or deadline.tzinfo is None):
        raise InvalidBatch("a batch deadline must be an aware datetime")
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise InvalidBatch("max_attempts must be a positive integer")

"""Checks ``outbox.send`` runs before it writes anything.

Each check raises a subclass of :class:`~django_outbox.exceptions.InvalidSend`
naming what is wrong, so a view can turn it into a 400 without guessing.
"""

from __future__ import annotations

import json
import re
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

# The fast path: one regular expression for the common well-formed inbox URL,
# every one of which the full check below accepts too.  A URL it does not match
# is not refused for that: it goes through the full check, so the URLs accepted
# and refused, and the error messages, are those of the full check alone.
# tests/test_validation.py runs both over tricky and generated URLs.
_H16 = "[0-9A-Fa-f]{1,4}"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_LS32 = rf"(?:{_H16}:{_H16}|{_OCTET}(?:\.{_OCTET}){{3}})"
_IPV6 = "|".join(  # RFC 3986 section 3.2.2: all of these, ipaddress.IPv6Address accepts
    (
        rf"(?:{_H16}:){{6}}{_LS32}",
        rf"::(?:{_H16}:){{5}}{_LS32}",
        rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
        rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    )
)
_PORT = "(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
_PATH_QUERY = r"(?:[/?][\x21\x22\x24-\x7e]*)?"  # printable ASCII but "#"; no spaces


def _url_pattern(host_groups: bool) -> str:
    """An http(s) URL: a host name, dotted IPv4 or [IPv6], port 1-65535, path and query."""
    name, ip6 = ("(?P<name>", "(?P<ip6>") if host_groups else ("(?:", "(?:")
    host = rf"(?:{name}[A-Za-z0-9_.-]+)|\[{ip6}{_IPV6})\])"
    return rf"[hH][tT][tT][pP][sS]?://{host}(?::{_PORT})?{_PATH_QUERY}"


_INBOX = re.compile(_url_pattern(host_groups=True), re.ASCII)
#: Inboxes joined by newlines (which no URL matched by _INBOX contains).
_INBOX_LINES = re.compile(rf"(?:{_url_pattern(False)}\n)*+{_url_pattern(False)}", re.ASCII)


def inbox_host(inbox: str) -> str:
    """The host of an inbox URL that :func:`clean_inboxes` accepted."""
    match = _INBOX.fullmatch(inbox)
    if match is None:
        return urlsplit(inbox).hostname or ""
    return str(match["name"] or match["ip6"]).lower()


def clean_inboxes(inboxes: Iterable[str], noun: str = "inbox") -> list[str]:
    """The inboxes, de-duplicated in their first order, each checked.

    An inbox must be an absolute ``http`` or ``https`` URL with a host, no
    user name or password, and no fragment.  Error messages call each URL a
    ``noun`` (webhooks have endpoints).
    """
    if isinstance(inboxes, str | bytes):
        raise InvalidInbox(f"{noun}s must be a list of URLs, not a single string")
    if type(inboxes) is list or type(inboxes) is tuple:
        clean = _clean_well_formed(inboxes)
        if clean is not None:
            return clean
    seen: dict[str, None] = {}
    for inbox in inboxes:
        if inbox in seen:
            continue
        if not (isinstance(inbox, str) and _INBOX.fullmatch(inbox)):
            _check_inbox(inbox, noun)
        seen[inbox] = None
    return list(seen)


def _clean_well_formed(inboxes: list[str] | tuple[str, ...]) -> list[str] | None:
    """The inboxes de-duplicated if all are well-formed, checked in one match; else None.

    ``None`` (also when an item is not a string, or cannot be hashed) sends the
    caller to the one-by-one check, which raises the error of the first bad inbox
    exactly as it would have without this.
    """
    try:
        seen = dict.fromkeys(inboxes)
        lines = "\n".join(seen)
    except Exception:  # the one-by-one check raises the same, in its order
        return None
    if lines.count("\n") != len(seen) - 1 or not _INBOX_LINES.fullmatch(lines):
        return None
    return list(seen)


def _check_inbox(inbox: object, noun: str = "inbox") -> None:
    """Raise :class:`InvalidInbox` naming what is wrong with ``inbox``, if anything."""
    if not isinstance(inbox, str):
        raise InvalidInbox(f"{noun} {inbox!r} is not a string")
    try:
        parts = urlsplit(inbox)
        port = parts.port
    except ValueError as error:
        raise InvalidInbox(f"{noun} {inbox!r} is not a valid URL: {error}") from None
    if parts.scheme not in _SCHEMES:
        raise InvalidInbox(f"{noun} {inbox!r} is not an absolute http(s) URL")
    if not parts.hostname:
        raise InvalidInbox(f"{noun} {inbox!r} has no host")
    if "@" in parts.netloc:
        raise InvalidInbox(f"{noun} {inbox!r} carries credentials")
    if parts.fragment or inbox.endswith("#"):
        raise InvalidInbox(f"{noun} {inbox!r} has a fragment")
    if port == 0 or any(c in inbox for c in " \t\r\n"):
        raise InvalidInbox(f"{noun} {inbox!r} is not a valid URL")


def serialise_activity(
    activity: object,
    max_bytes: int,
    *,
    encoder: type[json.JSONEncoder] | None = None,
    noun: str = "activity",
) -> bytes:
    """The exact bytes to send for ``activity``: compact UTF-8 JSON.

    ``encoder`` serialises what ``json`` cannot (webhooks use Django's, for
    dates, decimals and UUIDs); error messages call the object a ``noun``.
    """
    if not isinstance(activity, Mapping):
        raise InvalidActivity(f"the {noun} must be a JSON object, not {type(activity).__name__}")
    try:
        body = json.dumps(
            activity, ensure_ascii=False, separators=(",", ":"), allow_nan=False, cls=encoder
        ).encode()
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidActivity(f"the {noun} cannot be serialised to JSON: {error}") from None
    if len(body) > max_bytes:
        raise BodyTooLarge(f"the {noun} is {len(body)} bytes; the limit is {max_bytes}")
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

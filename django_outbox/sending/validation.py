"""Checks ``outbox.send`` runs before it writes anything.

Each check raises a subclass of :class:`~django_outbox.exceptions.InvalidSend`
naming what is wrong, so a view can turn it into a 400 without guessing.  What a
worker would fail on for every attempt (an unusable URL, content type or key) is
refused here instead, and every value is checked against the size of the column
that stores it (:mod:`django_outbox.values.columns`): nothing is cut to fit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django_outbox.exceptions import (
    BlockedEndpoint,
    BlockedInbox,
    BodyTooLarge,
    InvalidActivity,
    InvalidBatch,
    InvalidInbox,
    InvalidSenderKey,
    SenderTooLong,
    TooManyInboxes,
    UnknownSender,
)
from django_outbox.sending.keys import InvalidSigningKey, SenderKey, load_private_key, valid_key_id
from django_outbox.transport.addresses import IPNetwork, refusal_without_dns
from django_outbox.transport.target import (
    Target,
    parse_target,
    well_formed_lines,
)
from django_outbox.values import columns
from django_outbox.values.safe_text import shown as _shown

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[\t\x20\x21\x23-\x5b\x5d-\x7e]|\\[\t\x20-\x7e])*"'
#: RFC 9110 media type: type/subtype and parameters; ASCII, no CR or LF.
_MEDIA_TYPE = re.compile(
    rf"{_TOKEN}/{_TOKEN}(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|{_QUOTED}))*", re.ASCII
)
#: In canonical URLs joined by newlines (each preceded by one), the hosts that may mean
#: an address without DNS: those starting with a digit (a dotted quad, or a name such as
#: 1password.com), IPv6 literals, and localhost names.  Only these are judged one by one,
#: and only when one of the two cheap screens below finds a candidate at all.
_NAMED_ADDRESS = re.compile(
    r"\nhttps?://(\[[0-9a-f:.]*\]|[0-9][^/:\n]*|(?:[^/:\n]*\.)?localhost(?=[:/]))"
)
_LITERAL_SCREEN = re.compile(r"://[0-9\[]")


def clean_inboxes(
    inboxes: object,
    max_inboxes: int,
    allowed_networks: Sequence[IPNetwork],
    noun: str = "inbox",
) -> list[str]:
    """The inboxes in canonical form, de-duplicated in their first order.

    Each inbox is read by :func:`~django_outbox.transport.target.parse_target`, as
    signing and the transport read it, and stored as its canonical URL (so two
    spellings of one URL are one inbox).  Raises
    :class:`~django_outbox.exceptions.InvalidInbox` for the first bad one,
    :class:`~django_outbox.exceptions.TooManyInboxes` past ``max_inboxes`` distinct,
    and :class:`~django_outbox.exceptions.BlockedInbox` for one that names an address
    every worker would refuse (:func:`refuse_blocked_hosts`).  Error messages call each
    URL a ``noun`` (webhooks have endpoints).
    """
    if isinstance(inboxes, str | bytes | bytearray):
        raise InvalidInbox(f"{noun}s must be a list of URLs, not a single string")
    if type(inboxes) is list or type(inboxes) is tuple:
        _refuse_too_many(inboxes, max_inboxes)
        fast = _clean_well_formed(inboxes, max_inboxes)
        if fast is not None:
            clean, lines = fast
            _refuse_blocked(lines, allowed_networks, noun)
            return clean
    try:
        items = iter(inboxes)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidInbox(
            f"{noun}s must be an iterable of URLs, not {type(inboxes).__name__}"
        ) from None
    seen: dict[str, None] = {}
    for inbox in items:
        seen.setdefault(_read(inbox, noun).url, None)
        check_inbox_count(len(seen), max_inboxes)
    refuse_blocked_hosts(list(seen), allowed_networks, noun)
    return list(seen)


def refuse_blocked_hosts(
    urls: list[str], allowed_networks: Sequence[IPNetwork], noun: str = "inbox"
) -> None:
    """Refuse canonical URLs whose host every worker would refuse without a DNS look-up.

    An IP literal or ``localhost`` name that means an address outside
    ``allowed_networks`` and not public raises :class:`BlockedInbox`
    (:class:`BlockedEndpoint` for webhook endpoints): the rule is the transport's own
    (:func:`~django_outbox.transport.addresses.refusal_without_dns`), so what ``send()``
    accepts a worker will try.
    """
    _refuse_blocked("\n".join(urls), allowed_networks, noun)


def _refuse_blocked(lines: str, allowed_networks: Sequence[IPNetwork], noun: str) -> None:
    """:func:`refuse_blocked_hosts` for canonical URLs joined by newlines: two searches of
    the whole text (a few milliseconds for 100,000 URLs) find the few hosts to judge."""
    if _LITERAL_SCREEN.search(lines) is None and "localhost" not in lines:
        return
    joined = "\n" + lines
    for match in _NAMED_ADDRESS.finditer(joined):
        host = match[1].strip("[]")
        why = refusal_without_dns(host, allowed_networks)
        if why is not None:
            end = joined.find("\n", match.end())
            url = joined[match.start() + 1 : None if end < 0 else end]
            refused = BlockedEndpoint if noun == "endpoint" else BlockedInbox
            raise refused(
                f"{noun} {_shown(url)} names {host}, which is not a public address: {why} "
                "(OUTBOX_ALLOWED_NETWORKS lists the networks allowed)"
            )


def _read(inbox: object, noun: str) -> Target:
    """``inbox`` read by ``parse_target``; its errors call the URL a ``noun``."""
    try:
        return parse_target(inbox, columns.URL)  # type: ignore[arg-type]
    except InvalidInbox as error:
        if noun == "inbox":
            raise
        raise InvalidInbox(str(error).replace("inbox", noun, 1)) from None


def _refuse_too_many(inboxes: list[Any] | tuple[Any, ...], max_inboxes: int) -> None:
    """Refuse a list of too many distinct items before reading any of them."""
    if len(inboxes) <= max_inboxes:
        return
    try:
        distinct = len(set(inboxes))
    except Exception:  # an unhashable item: the one-by-one check names it
        return
    check_inbox_count(distinct, max_inboxes)


def check_inbox_count(count: int, max_inboxes: int) -> None:
    """Raise :class:`TooManyInboxes` if ``count`` distinct inboxes are too many."""
    if count > max_inboxes:
        raise TooManyInboxes(
            f"one send may name at most {max_inboxes} distinct inboxes "
            "(OUTBOX_MAX_INBOXES); split the list or raise the setting"
        )


def _clean_well_formed(
    inboxes: list[Any] | tuple[Any, ...], max_inboxes: int
) -> tuple[list[str], str] | None:
    """The inboxes de-duplicated if all are canonical URLs, checked in one match, and
    joined by newlines; else None.

    ``None`` (also when an item is not a string, or cannot be hashed) sends the
    caller to the one-by-one check, which raises the error of the first bad inbox
    exactly as it would have without this.
    """
    try:
        seen = dict.fromkeys(inboxes)
        lines = "\n".join(seen)
    except Exception:  # the one-by-one check raises the same, in its order
        return None
    if set(map(type, seen)) != {str}:  # a str subclass may hash and compare as it likes
        return None
    if lines.count("\n") != len(seen) - 1 or not well_formed_lines(lines, columns.URL):
        return None
    check_inbox_count(len(seen), max_inboxes)
    return list(seen), lines


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
    except (TypeError, ValueError) as error:
        raise InvalidActivity(f"the {noun} cannot be serialised to JSON: {error}") from None
    except RecursionError:
        raise InvalidActivity(f"the {noun} is nested too deeply to serialise") from None
    if len(body) > max_bytes:
        raise BodyTooLarge(f"the {noun} is {len(body)} bytes; the limit is {max_bytes}")
    return body


def activity_type(activity: Mapping[str, Any]) -> str:
    """The activity's ``type`` (the first, if a list), for admin and skip predicates.

    A type that is no string gives ``""``; a string type must fit its column and be
    printable, or the send is refused with :class:`InvalidActivity`.
    """
    kind = activity.get("type", "")
    if isinstance(kind, list):
        kind = kind[0] if kind else ""
    if not isinstance(kind, str):
        return ""
    if len(kind) > columns.ACTIVITY_TYPE or not kind.isprintable():
        raise InvalidActivity(
            f"the activity's type {_shown(kind)} must be printable and at most "
            f"{columns.ACTIVITY_TYPE} characters"
        )
    return str.__str__(kind)


def check_content_type(content_type: object) -> str:
    """Refuse a content type that is not a media type fit for a header and its column."""
    if (
        not isinstance(content_type, str)
        or len(content_type) > columns.CONTENT_TYPE
        or not _MEDIA_TYPE.fullmatch(content_type)
    ):
        raise InvalidActivity(
            f"the content type {_shown(content_type)} is not a media type of at most "
            f"{columns.CONTENT_TYPE} characters (type/subtype; parameters)"
        )
    return str.__str__(content_type)


def actor_id(actor: object) -> str:
    """The id an actor is signed as: a string as it is, or a model's id attribute.

    Objects are asked, in order, for ``actor_id``, ``ap_id``, ``actor_uri``,
    ``remote_id`` and ``uri`` (Takahē, BookWyrm and Mastodon-style names).  The id
    must be printable and fit its column.
    """
    if isinstance(actor, str):
        return _check_actor_id(actor)
    for name in ("actor_id", "ap_id", "actor_uri", "remote_id", "uri"):
        value = getattr(actor, name, None)
        if isinstance(value, str) and value:
            return _check_actor_id(value)
    raise UnknownSender(f"cannot tell the actor id of {_shown(actor)}; pass its id as a string")


def _check_actor_id(value: str) -> str:
    if not value:
        raise UnknownSender("the actor is an empty string")
    check_sender_length(value, "actor id")
    if not value.isprintable():
        raise UnknownSender(f"the actor id {_shown(value)} must be printable")
    return str.__str__(value)


def check_sender_length(value: str, noun: str) -> None:
    """Raise :class:`SenderTooLong` if ``value`` does not fit the column of senders."""
    if len(value) > columns.URL:
        raise SenderTooLong(
            f"the {noun} {_shown(value)} is {len(value)} characters long; at most {columns.URL} fit"
        )


def check_sender_key(sender: str, key: object) -> SenderKey:
    """The key the resolver returned for ``sender``, if a worker could sign with it.

    The PEM is parsed as a worker would (cached per process, so a key's parse is paid
    once), so an EC key or garbage is refused at ``send()`` rather than on every
    attempt for two days.  No error holds the key material.
    """
    if key is None:
        raise UnknownSender(f"the key resolver has no key for {_shown(sender)}")
    if not isinstance(key, SenderKey):
        raise InvalidSenderKey(
            f"the key resolver returned an object of type {type(key).__name__} for "
            f"{_shown(sender)}, not a SenderKey"
        )
    if not valid_key_id(key.key_id):
        raise InvalidSenderKey(
            f"the key id {_shown(key.key_id)} of {_shown(sender)} must be printable ASCII "
            "without quotes or backslashes"
        )
    try:
        load_private_key(key.private_key_pem)
    except InvalidSigningKey as error:
        raise InvalidSenderKey(f"the key of {_shown(sender)} cannot sign: {error}") from None
    return key


def check_batch_options(
    tag: object,
    deadline: object,
    ordering_key: object,
    max_attempts: object,
    flags: Mapping[str, object] | None = None,
) -> None:
    """Refuse batch options that could not be stored or honoured."""
    if tag is not None and not _fits(tag, columns.TAG):
        raise InvalidBatch(
            f"a batch tag must be a printable string of at most {columns.TAG} characters"
        )
    if ordering_key is not None and not _fits(ordering_key, columns.ORDERING_KEY):
        raise InvalidBatch(
            "an ordering key must be a printable string of at most "
            f"{columns.ORDERING_KEY} characters"
        )
    if deadline is not None and not _aware(deadline):
        raise InvalidBatch("a batch deadline must be an aware datetime")
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise InvalidBatch("max_attempts must be a positive integer")
    for name, value in (flags or {}).items():
        if not isinstance(value, bool):
            raise InvalidBatch(f"{name} must be True or False, not {_shown(value)}")


def _fits(value: object, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit and value.isprintable()


def _aware(value: object) -> bool:
    """An aware datetime that can be written in UTC (year 1 at UTC+1 cannot)."""
    if not isinstance(value, datetime) or value.utcoffset() is None:
        return False
    try:
        value.astimezone(UTC)
    except OverflowError:
        return False
    return True

"""Recipients to delivery targets: one inbox URL per delivery, shared inboxes first.

An application usually knows whom it addresses (followers, mentioned actors)
rather than which inboxes to post to.  :func:`collapse` turns recipients into
the inbox URLs to deliver to: with ``prefer_shared_inbox`` (the default, as
Mastodon does) every recipient with a shared inbox is reached through it, so a
server with 5,000 followers gets one delivery rather than 5,000; recipients on
the sender's own hosts are dropped (as Fedify's ``excludeBaseUris``).

A recipient is a plain inbox URL (a ``str``), a :class:`Recipient`, or any
object with ``inbox`` and ``shared_inbox`` attributes, such as BookWyrm's user
model.  Models that name them otherwise (Takahē's ``inbox_uri`` and
``shared_inbox_uri``, Mastodon-style ``inbox_url`` and ``shared_inbox_url``) are
passed as ``Recipient(identity.inbox_uri, identity.shared_inbox_uri)``: no
guessing among attribute names, so a model with both spellings cannot be read
the wrong way.

The URLs are not checked here; ``outbox.send`` checks the targets as it checks
any inbox.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from django_outbox.exceptions import InvalidInbox
from django_outbox.values.safe_text import shown

__all__ = ["HasInbox", "InvalidRecipient", "Recipient", "collapse"]


class InvalidRecipient(InvalidInbox):
    """A recipient has no inbox nor shared inbox, or one that is not a string."""


@dataclass(frozen=True, slots=True)
class Recipient:
    """An actor as a delivery sees it: its inbox and, if it has one, its shared inbox."""

    inbox: str
    shared_inbox: str | None = None


class HasInbox(Protocol):
    """Any object with an actor's ``inbox`` and ``shared_inbox`` (either may be None or "")."""

    @property
    def inbox(self) -> str | None: ...

    @property
    def shared_inbox(self) -> str | None: ...


def collapse(
    recipients: Iterable[str | Recipient | HasInbox],
    *,
    prefer_shared_inbox: bool = True,
    exclude_hosts: Collection[str] = (),
) -> list[str]:
    """The inbox URLs to deliver to, each once, in the order first reached.

    A recipient is reached through its shared inbox when ``prefer_shared_inbox``
    is set and it has one, else through its inbox (or through its shared inbox
    if that is all it has).  An empty string counts as no inbox, as a blank
    model field means.

    A recipient whose inbox is on one of ``exclude_hosts`` is dropped (it is
    the sender's own); a shared inbox on one of them is never a target, and its
    recipients are reached through their own inboxes.  Hosts are compared as
    lower-case host names without port; an entry of ``exclude_hosts`` may also
    be a URL, whose host is taken.

    Raises :class:`InvalidRecipient` for ``None``, a recipient with neither an
    inbox nor a shared inbox, an inbox or shared inbox that is not a string, and
    an ``exclude_hosts`` that is a single string rather than a collection.
    """
    if isinstance(recipients, str | bytes):
        raise InvalidRecipient("recipients must be a collection, not a single string")
    if not isinstance(recipients, Iterable):
        raise InvalidRecipient(f"recipients must be a collection, not {type(recipients).__name__}")
    hosts = _excluded_hosts(exclude_hosts)
    plain = _plain_targets(recipients, hosts)
    if plain is not None:
        return plain
    excluded = _exclusion(hosts)
    shared_excluded: dict[str, bool] = {}  # a shared inbox serves many recipients
    targets: dict[str, None] = {}
    for recipient in recipients:
        if type(recipient) is str and recipient:
            inbox, shared = recipient, None
        else:
            inbox, shared = _inboxes(recipient)
        if excluded is not None:
            if inbox and excluded(inbox):
                continue
            if shared:
                drop = shared_excluded.get(shared)
                if drop is None:
                    drop = shared_excluded[shared] = excluded(shared)
                if drop:
                    if not inbox:
                        continue
                    shared = None
        targets[shared if shared and (prefer_shared_inbox or not inbox) else inbox] = None
    return list(targets)


def _inboxes(recipient: object) -> tuple[str, str | None]:
    """A recipient's (inbox, shared inbox); the inbox is "" if it has none."""
    if isinstance(recipient, str):
        if not recipient:
            raise InvalidRecipient("a recipient is an empty string")
        return str.__str__(recipient), None  # a str subclass may compare as it likes
    if recipient is None:
        raise InvalidRecipient("a recipient is None")
    inbox = getattr(recipient, "inbox", None)
    shared = getattr(recipient, "shared_inbox", None)
    if inbox is not None and not isinstance(inbox, str):
        raise InvalidRecipient(f"the inbox of {_shown(recipient)} is not a string: {shown(inbox)}")
    if shared is not None and not isinstance(shared, str):
        raise InvalidRecipient(
            f"the shared inbox of {_shown(recipient)} is not a string: {shown(shared)}"
        )
    if not inbox and not shared:
        raise InvalidRecipient(f"{_shown(recipient)} has no inbox nor shared_inbox")
    return str.__str__(inbox or ""), None if shared is None else str.__str__(shared)


def _shown(recipient: object) -> str:
    """A recipient for an error message: its repr (a model's says who), cut short; its
    type when the repr fails (an integer of 5,000 digits has none)."""
    try:
        text = repr(recipient)
    except Exception:
        return shown(recipient)
    return text if len(text) <= 200 else text[:197] + "..."


def _excluded_hosts(exclude_hosts: Collection[str]) -> frozenset[str]:
    if isinstance(exclude_hosts, str | bytes) or not isinstance(exclude_hosts, Iterable):
        raise InvalidRecipient("exclude_hosts must be a collection of host names, not a string")
    hosts = set()
    for entry in exclude_hosts:
        if not isinstance(entry, str):
            host = None
        elif "://" in entry:
            host = _host(entry)
        else:
            host = entry
        if not host:
            raise InvalidRecipient(f"exclude_hosts holds {shown(entry)}, not a host name or URL")
        hosts.add(host.lower().removeprefix("[").removesuffix("]"))
    return frozenset(hosts)


def _host(url: str) -> str | None:
    """The lower-case host name of a URL, without port; None if it has none."""
    try:
        return urlsplit(url).hostname
    except ValueError as error:
        raise InvalidRecipient(f"cannot tell the host of {url!r}: {error}") from None


def _plain_targets(recipients: object, hosts: frozenset[str]) -> list[str] | None:
    """The targets of a list or tuple of plain inbox URLs none of which is on ``hosts``,
    found without reading them one by one; None when that cannot be told so.

    The screen of :func:`_exclusion` runs once over all the URLs joined by
    newlines, a tenth of its cost on each, when they are ASCII without tab or
    line break.  A name found across two joined URLs only sends them to the
    test of each.  An empty string is left to :func:`_inboxes` to refuse.
    """
    if type(recipients) is not list and type(recipients) is not tuple:
        return None
    try:
        joined = "\n".join(recipients)
    except TypeError:  # not all strings
        return None
    if set(map(type, recipients)) != {str}:  # a str subclass may hash and compare as it likes
        return None
    if hosts and not _clear_of(hosts, joined, len(recipients)):
        return None
    targets = dict.fromkeys(recipients)
    return None if "" in targets else list(targets)


def _clear_of(hosts: frozenset[str], joined: str, count: int) -> bool:
    """Whether none of the ``count`` URLs of ``joined`` (see :func:`_plain_targets`)
    can be on ``hosts``."""
    if (
        not joined.isascii()
        or not all(host.isascii() for host in hosts)
        or joined.count("\n") != count - 1
        or "\t" in joined
        or "\r" in joined
    ):
        return False
    names = "|".join(re.escape(host) for host in sorted(hosts))
    return re.search(names, joined.lower()) is None


def _exclusion(hosts: frozenset[str]) -> Callable[[str], bool] | None:
    """A test of whether a URL is on one of ``hosts``; None if there are none.

    Parsing costs about 5 µs a URL, so most URLs are not parsed: an ASCII URL
    whose lower-cased text contains no excluded host name, nor a tab or line
    break (which ``urlsplit`` deletes), cannot be on one, since the host
    :func:`_host` finds is then a lower-cased piece of the URL.  The others are
    parsed once per scheme and authority (the URL up to the first "/" after
    ``http://`` or ``https://``, which holds all of the authority), or whole if
    they are not http(s).  A parser put in :func:`_host` must keep both facts
    true (no percent-decoding or IDNA mapping of the host), or drop the screen.
    """
    if not hosts:
        return None
    names = [re.escape(host) for host in sorted(hosts) if host.isascii()]
    # A pattern of literals only: a character class among them would slow it fourfold.
    screen = re.compile("|".join(names)).search if names else None
    by_authority: dict[str, bool] = {}

    def excluded(url: str) -> bool:
        if (
            url.isascii()
            and (screen is None or screen(url.lower()) is None)
            and "\t" not in url
            and "\n" not in url
            and "\r" not in url
        ):
            return False
        if not url.startswith(("https://", "http://")):
            return _host(url) in hosts
        end = url.find("/", 8)
        key = url if end < 0 else url[:end]
        found = by_authority.get(key)
        if found is None:
            found = by_authority[key] = _host(key) in hosts
        return found

    return excluded

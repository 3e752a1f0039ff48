"""The one parser of inbox URLs: what is stored, what is signed and what is requested.

An inbox URL comes from a stranger's actor document.  Validation, signing and the
transport used to read it with three parsers that disagreed (``http://h\\.example/``
was stored with host ``h\\.example`` and requested from ``h``); now each reads the
:class:`Target` that :func:`parse_target` returns, and the database stores
``Target.url``, which parses again to the same Target.

The canonical form, and what is refused:

* scheme ``http`` or ``https``, lower case, followed by ``//``;
* no credentials, no fragment (not even a bare ``#``), no backslash, no space and
  no control character anywhere;
* a host name is lower-cased; a non-ASCII label is mapped (UTS 46) and turned into
  an A-label with the ``idna`` package, unless it maps to plain ASCII (``ⓛⓞⓒⓐⓛⓗⓞⓢⓣ``
  is ``localhost`` in disguise), and an ``xn--`` label must be a valid A-label.
  Labels are letters, digits, ``_`` and inner hyphens, 1 to 63 octets, at most 253 in
  all.  A trailing dot is refused: the name would differ from the TLS name and the
  Host header of the same server without it;
* an IPv4 address only as a canonical dotted quad: a host whose last label is a
  number (``127.1``, ``0x7f.1``, ``0177.0.0.1``, ``2130706433``) is refused, since
  resolvers and libc read such forms differently.  An IPv6 address in brackets is
  rewritten in RFC 5952 form (the same on every Python); zone ids are refused;
* the port is 1 to 65535, at most five digits, and dropped from the URL when default;
* the path loses its ``.`` and ``..`` segments (as urllib3 and browsers do) and is
  ``/`` when empty; path and query keep their own percent-escapes (hex in upper
  case), a ``%`` that starts no escape is refused, and every other character not
  allowed on the wire, non-ASCII included, is percent-encoded as UTF-8.

:func:`well_formed_lines` and :func:`canonical_host` are the fast path for ``send()``:
a regular expression that matches only URLs already in canonical form.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from dataclasses import dataclass
from functools import lru_cache

import idna

from django_outbox.exceptions import InvalidInbox
from django_outbox.values import columns
from django_outbox.values.safe_text import shown as _shown

#: The default longest URL accepted: the size of the column that stores it.
DEFAULT_MAX_LENGTH = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Target:
    """An inbox URL read once: where to connect, what to send, what to sign and store.

    ``host`` is the lower-case A-label name, dotted-quad IPv4 or IPv6 address without
    brackets, the name to resolve and to check the TLS certificate against.  ``port``
    is the effective port.  ``path`` is the request target exactly as sent (path and
    ``?query``), and what ``(request-target)`` signs.  ``host_header`` is the Host
    header and ``@authority``; ``origin`` is ``scheme://host_header``; ``url`` is the
    canonical URL to store and to sign as ``@target-uri``.
    """

    scheme: str
    host: str
    port: int
    path: str
    host_header: str
    origin: str
    url: str


# Characters that may appear unquoted in a path, as urllib3 leaves them; a query
# may also hold "?".
_PATH_SAFE = r"A-Za-z0-9\-._~!$&'()*+,;=:@/"
_REFUSED = re.compile(r"[\x00-\x20\x7f-\x9f\\#]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_AUTHORITY_END = re.compile(r"[/?]")
_QUOTE_PATH = re.compile(rf"%([0-9A-Fa-f]{{2}})|%|[^{_PATH_SAFE}]")
_QUOTE_QUERY = re.compile(rf"%([0-9A-Fa-f]{{2}})|%|[^{_PATH_SAFE}?]")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_\-]{0,61}[a-z0-9_])?")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")  # a label a URL parser takes for IPv4


def parse_target(url: str, max_length: int = DEFAULT_MAX_LENGTH) -> Target:
    """Read an inbox URL into a :class:`Target`, or raise :class:`InvalidInbox` saying why.

    ``max_length`` bounds the URL both as given and in canonical form (quoting can make
    it longer); pass the setting that sizes the column.  Results are cached.
    """
    if not isinstance(url, str):
        raise InvalidInbox(f"an inbox of type {type(url).__name__} is not a string")
    return _parse(str.__str__(url), max_length)


@lru_cache(maxsize=4096)
def _parse(url: str, max_length: int) -> Target:
    shown = _shown(url)
    if len(url) > max_length:
        raise InvalidInbox(f"inbox {shown} is longer than {max_length} characters")
    refused = _REFUSED.search(url)
    if refused is not None:
        raise InvalidInbox(f"inbox {shown} {_why_refused(refused.group())}")
    scheme_match = _SCHEME.match(url)
    if scheme_match is None:
        raise InvalidInbox(f"inbox {shown} is not an absolute http(s) URL")
    scheme = scheme_match.group()[:-1].lower()
    if scheme not in DEFAULT_PORTS:
        raise InvalidInbox(f"inbox {shown} is not an http(s) URL")
    rest = url[scheme_match.end() :]
    if not rest.startswith("//"):
        raise InvalidInbox(f"inbox {shown} has no host: expected {scheme}://host/...")
    end = _AUTHORITY_END.search(rest, 2)
    cut = len(rest) if end is None else end.start()
    authority, tail = rest[2:cut], rest[cut:]
    if "@" in authority:
        raise InvalidInbox(f"inbox {shown} carries credentials")
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise InvalidInbox(f"inbox {shown} has an unclosed '[' in its host")
        host = _ipv6(authority[1:close], shown)
        after = authority[close + 1 :]
        if after and after[0] != ":":
            raise InvalidInbox(f"inbox {shown} has characters after its IPv6 address")
        port = _port(after[1:] if after else None, scheme, shown)
        shown_host = f"[{host}]"
    else:
        name, colon, port_text = authority.partition(":")
        host = shown_host = _host_name(name, shown)
        port = _port(port_text if colon else None, scheme, shown)
    host_header = shown_host if port == DEFAULT_PORTS[scheme] else f"{shown_host}:{port}"
    origin = f"{scheme}://{host_header}"
    path = _request_target(tail, shown)
    canonical = origin + path
    if len(canonical) > max_length:
        raise InvalidInbox(
            f"inbox {shown} is longer than {max_length} characters once percent-encoded"
        )
    return Target(scheme, host, port, path, host_header, origin, canonical)


def _why_refused(char: str) -> str:
    if char == "#":
        return "has a fragment"
    if char == "\\":
        return "contains a backslash"
    if char == " ":
        return "contains a space"
    return f"contains the control character U+{ord(char):04X}"


def _host_name(text: str, shown: str) -> str:
    """The canonical host of an authority without brackets: A-labels or dotted quad."""
    if not text:
        raise InvalidInbox(f"inbox {shown} has no host")
    name = text.lower() if text.isascii() else _to_ascii(text, shown)
    if name.endswith("."):
        raise InvalidInbox(f"inbox {shown} has a host ending in a dot; leave the dot out")
    if len(name) > 253:
        raise InvalidInbox(f"inbox {shown} has a host longer than 253 characters")
    labels = name.split(".")
    for label in labels:
        if not label:
            raise InvalidInbox(f"inbox {shown} has an empty label in its host {name!r}")
        if len(label) > 63:
            raise InvalidInbox(f"inbox {shown} has a host label longer than 63 characters")
        if not _LABEL.fullmatch(label):
            raise InvalidInbox(f"inbox {shown} has an invalid host label {label!r}")
        if label.startswith("xn--") and not _valid_alabel(label):
            raise InvalidInbox(f"inbox {shown} has an invalid IDNA A-label {label!r}")
    if _IPV4.fullmatch(name) is None and _NUMBER.fullmatch(labels[-1]):
        raise InvalidInbox(f"inbox {shown} has an IPv4 address not in dotted-quad form")
    return name


def _to_ascii(text: str, shown: str) -> str:
    """A non-ASCII host name in A-labels: each non-ASCII label mapped (UTS 46), then
    turned into an A-label (IDNA 2008).

    A label that maps to plain ASCII is refused: enclosed alphanumerics
    (``ⓛⓞⓒⓐⓛⓗⓞⓢⓣ`` maps to ``localhost``), fullwidth letters and digits, the Kelvin
    sign are characters IDNA 2008 refuses, and an ASCII name written so is one in
    disguise.
    """
    labels = []
    for label in text.split("."):
        if label.isascii():
            labels.append(label.lower())
            continue
        try:  # idna.IDNAError is a UnicodeError
            mapped = idna.uts46_remap(label, std3_rules=False, transitional=False)
            if mapped.isascii():
                raise InvalidInbox(
                    f"inbox {shown} has a host label {label!r} that IDNA 2008 refuses: "
                    f"it stands for the ASCII {mapped!r}"
                )
            labels.append(idna.alabel(mapped).decode("ascii"))
        except UnicodeError as error:
            raise InvalidInbox(
                f"inbox {shown} has a host that is not valid IDNA: {error}"
            ) from None
    return ".".join(labels)


def _valid_alabel(label: str) -> bool:
    """Whether an ``xn--`` label decodes to a valid U-label that encodes back to it."""
    try:
        return bool(idna.alabel(idna.ulabel(label)).decode("ascii") == label)
    except UnicodeError:
        return False


def _ipv6(text: str, shown: str) -> str:
    """The RFC 5952 text of a bracketed IPv6 literal's inside; zone ids refused."""
    if "%" in text:
        raise InvalidInbox(f"inbox {shown} has an IPv6 zone id")
    try:
        if not text.isascii():
            raise ValueError(text)
        value = int(ipaddress.IPv6Address(text))
    except ValueError:
        raise InvalidInbox(f"inbox {shown} has an invalid IPv6 address") from None
    groups = [(value >> shift) & 0xFFFF for shift in range(112, -1, -16)]
    best, best_length, start = 0, 0, None
    for index, group in enumerate([*groups, 1]):  # the sentinel closes a trailing run
        if group == 0 and start is None:
            start = index
        elif group != 0 and start is not None:
            if index - start > best_length:
                best, best_length = start, index - start
            start = None
    text_groups = [f"{group:x}" for group in groups]
    if best_length < 2:
        return ":".join(text_groups)
    return ":".join(text_groups[:best]) + "::" + ":".join(text_groups[best + best_length :])


def _port(text: str | None, scheme: str, shown: str) -> int:
    """The effective port: the scheme's default when the URL names none."""
    if text is None:
        return DEFAULT_PORTS[scheme]
    if not text:
        raise InvalidInbox(f"inbox {shown} has an empty port")
    if not (text.isascii() and text.isdigit()):
        raise InvalidInbox(f"inbox {shown} has a port that is not a number")
    if len(text) > 5 or not 1 <= int(text) <= 65535:
        raise InvalidInbox(f"inbox {shown} has a port out of range (1-65535)")
    return int(text)


def _request_target(tail: str, shown: str) -> str:
    """Path and query as sent: dot segments removed, characters quoted as on the wire."""
    path, question, query = tail.partition("?")
    path = _quote(_remove_dot_segments(path) or "/", _QUOTE_PATH, shown)
    return f"{path}?{_quote(query, _QUOTE_QUERY, shown)}" if question else path


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for an absolute path, with the edge cases urllib3 keeps."""
    if "." not in path:
        return path
    kept: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if kept:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    if path.startswith("/") and (not kept or kept[0]):
        kept.insert(0, "")
    if path.endswith(("/.", "/..")):
        kept.append("")
    return "/".join(kept)


def _quote(text: str, pattern: re.Pattern[str], shown: str) -> str:
    """Percent-encode what may not go on the wire; upper-case the escapes already there."""
    if pattern.search(text) is None:
        return text

    def replace(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return "%" + match.group(1).upper()
        if match.group() == "%":
            raise InvalidInbox(f"inbox {shown} has a '%' that starts no percent-escape")
        return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8"))

    try:
        return pattern.sub(replace, text)
    except UnicodeEncodeError:
        raise InvalidInbox(f"inbox {shown} is not valid Unicode") from None


# The fast path: URLs already in canonical form, and only those.  Host names without
# "xn--" labels whose last label starts with a letter (so never a number), canonical
# dotted quads, no IPv6; a port other than 80 and 443; a path of safe characters and
# upper-case escapes without "." or ".." segments; an optional query.
_FAST_SEGMENT = r"[A-Za-z0-9\-._~!$&'()*+,;=:@]"
_FAST_QUERY = r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?]"
# A label of at most 63 characters: the possessive bound leaves a longer one unmatched.
_FAST_LABEL = r"(?!xn--)[a-z0-9_][a-z0-9_\-]{0,62}+(?<!-)"
_FAST_LAST = r"(?!xn--)[a-z][a-z0-9_\-]{0,62}+(?<!-)"
_FAST_NAME = rf"(?![a-z0-9_.\-]{{254}})(?:{_FAST_LABEL}\.)*+{_FAST_LAST}"
_FAST_PORT = (
    r"(?!80/|443/)"
    r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
)
_FAST_PATH = (
    rf"(?:/(?!\.\.?(?:[/?\n]|\Z)){_FAST_SEGMENT}*+(?:%[0-9A-F]{{2}}{_FAST_SEGMENT}*+)*+)++"
    rf"(?:\?{_FAST_QUERY}*+(?:%[0-9A-F]{{2}}{_FAST_QUERY}*+)*+)?+"
)


def _fast_url(max_length: int, host: str) -> str:
    """A canonical URL of at most ``max_length`` characters; ``host`` opens its host group."""
    return (
        rf"(?![^\n]{{{max_length + 1}}})https?+://({host}{_FAST_NAME}|{_IPV4.pattern})"
        rf"(?::{_FAST_PORT})?+{_FAST_PATH}"
    )


#: Whether this Python's ``re`` matches possessive quantifiers rightly: before 3.11.5
#: some match where the greedy ones would not (CPython gh-106052, gh-100061; Debian 12
#: has 3.11.2), and there the fast path takes nothing: every URL gets the full checks.
FAST_PATH_ON = sys.version_info >= (3, 11, 5)


@lru_cache(maxsize=8)
def _fast_patterns(max_length: int) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The fast path for one URL (host captured) and for URLs joined by newlines."""
    if not FAST_PATH_ON:
        never = re.compile(r"(?!)")
        return never, never
    url = _fast_url(max_length, "?:")
    return (
        re.compile(_fast_url(max_length, "?P<host>"), re.ASCII),
        re.compile(rf"(?:{url}\n)*+{url}", re.ASCII),
    )


def canonical_host(url: str, max_length: int = DEFAULT_MAX_LENGTH) -> str | None:
    """The host of ``url`` if the fast path takes it, else None (use :func:`parse_target`).

    When it returns a host, ``parse_target(url).url == url`` and the host is
    ``parse_target(url).host``: the fast path matches only canonical URLs.
    """
    match = _fast_patterns(max_length)[0].fullmatch(url)
    return None if match is None else match["host"]


def well_formed_lines(text: str, max_length: int = DEFAULT_MAX_LENGTH) -> bool:
    """Whether every line of ``text`` (URLs joined by newlines) passes the fast path.

    ``send()`` checks 100,000 inboxes with one call; when it returns False, check
    them one by one with :func:`parse_target` for the error of the first bad one.
    """
    return _fast_patterns(max_length)[1].fullmatch(text) is not None


def inbox_host(inbox: str) -> str:
    """The host of an inbox URL ``outbox.send`` accepted: the one the worker contacts."""
    return canonical_host(inbox, columns.URL) or parse_target(inbox, columns.URL).host

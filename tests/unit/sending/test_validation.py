"""Inbox URL checks: the regular-expression fast path gives the full check's verdicts.

``clean_inboxes`` accepts a list of canonical URLs in one match and sends any
other list through ``parse_target``, one inbox at a time.  These tests hold it to
the result the full check alone gives (``reference`` below): the same canonical
URLs accepted, in the same de-duplicated order, and the same error for the same
first bad inbox.  No database: they run in any suite.
"""

from __future__ import annotations

import ipaddress
import os
import random
from collections.abc import Callable, Iterable, Sequence

import pytest

from django_outbox.exceptions import InvalidInbox
from django_outbox.sending.validation import clean_inboxes
from django_outbox.transport import target
from django_outbox.transport.addresses import parse_networks
from django_outbox.transport.target import inbox_host, parse_target, well_formed_lines

#: Set OUTBOX_FUZZ_SEED to explore other generated URLs (the default is fixed).
SEED = int(os.environ.get("OUTBOX_FUZZ_SEED", "4"))

GOOD = "https://mastodon.example/users/alice/inbox"
MAX_INBOXES = 100_000

TRICKY = [
    GOOD,
    "http://a.example",
    "https://a.example/",
    "https://a.example?x=1",
    "https://a.example/?",
    "https://a.example??",
    "https://a.example/inbox?a=b&c=d",
    "https://a.example/@alice/inbox",
    "https://a.example/[x]{y}|^`\"'<>\\",
    # ports
    "https://a.example:0/inbox",
    "https://a.example:00/inbox",
    "https://a.example:1/inbox",
    "https://a.example:01/inbox",
    "https://a.example:443",
    "https://a.example:65535/inbox",
    "https://a.example:065535/inbox",
    "https://a.example:65536/inbox",
    "https://a.example:99999/inbox",
    "https://a.example:100000/inbox",
    "https://a.example:/inbox",
    "https://a.example:abc/inbox",
    "https://a.example:-1/inbox",
    "https://a.example:+1/inbox",
    "https://a.example:1_0/inbox",
    "https://a.example: 80/inbox",
    "https://a.example:\u0663/inbox",
    "https://a.example:\uff18\uff10/inbox",
    "https://a.example:80:80/inbox",
    # IPv4 and IPv6
    "https://1.2.3.4/inbox",
    "https://1.2.3.4:8080/inbox",
    "https://999.999.999.999/inbox",
    "https://[::1]/inbox",
    "https://[::1]:8080/inbox",
    "https://[::1]:0/inbox",
    "https://[::1]:65536/inbox",
    "https://[FE80::A:1]/inbox",
    "https://[fe80::1%25eth0]/inbox",
    "https://[fe80::1%eth0]/inbox",
    "https://[::ffff:1.2.3.4]/inbox",
    "https://[::ffff:01.2.3.4]/inbox",
    "https://[::ffff:256.2.3.4]/inbox",
    "https://[1:2:3:4:5:6:7:8]/inbox",
    "https://[1:2:3:4:5:6:7:8:9]/inbox",
    "https://[1:2:3:4:5:6:7::]/inbox",
    "https://[::1:2:3:4:5:6:7]/inbox",
    "https://[1:2:3:4:5:6:1.2.3.4]/inbox",
    "https://[1:2:3:4:5:6:7:1.2.3.4]/inbox",
    "https://[1::2::3]/inbox",
    "https://[12345::]/inbox",
    "https://[:::]/inbox",
    "https://[1.2.3.4]/inbox",
    "https://[]/inbox",
    "https://[v1.x]/inbox",
    "https://[vz.x]/inbox",
    "https://[::1/inbox",
    "https://::1]/inbox",
    "https://[::1]x/inbox",
    "https://x[::1]/inbox",
    "https://[::1]:/inbox",
    # credentials
    "https://user@a.example/inbox",
    "https://user:pw@a.example/inbox",
    "https://@a.example/inbox",
    "https://a.example\\@evil.example/inbox",
    # fragments
    "https://a.example/inbox#x",
    "https://a.example/inbox#",
    "https://a.example#",
    "https://a.example/#/x",
    "https://a.example/?q#",
    # whitespace and control characters
    " https://a.example/inbox",
    "https://a.example/inbox ",
    "https://a.example/in box",
    "https://a.example/inbox\t",
    "\thttps://a.example/inbox",
    "https://a.\nexample/inbox",
    "https://a.example/inbox\r\n",
    "https://a.example/inbox\n",
    "https://a.example/\x00",
    "\x01https://a.example/inbox",
    "https://a.example/\x7f",
    "https://a.exa\x0bmple/inbox",
    "https://a.example/\u00a0",
    "https://a.example/\u2028",
    # schemes
    "HTTPS://A.EXAMPLE/INBOX",
    "Http://a.example/inbox",
    "httpS://a.example",
    "http\u017f://a.example/inbox",
    "ftp://a.example/inbox",
    "httpss://a.example/inbox",
    "javascript:alert(1)",
    "mailto:a@b.example",
    # no host
    "https:///inbox",
    "https://:443/inbox",
    "https://?x",
    "https://",
    "http://",
    "http:/x",
    "http:x",
    "https:",
    "//a.example/inbox",
    "/inbox",
    "",
    "a.example/inbox",
    # odd host names
    "https://\u212a.example/inbox",
    "https://b\u00fccher.example/inbox",
    "https://xn--bcher-kva.example/inbox",
    "https://\u4f8b\u3048.\u30c6\u30b9\u30c8/inbox",
    "https://a\u2100b.example/inbox",
    "https://\uff41.example/inbox",
    "https://a.example/\u00fc",
    "https://a..example/inbox",
    "https://./inbox",
    "https://-/inbox",
    "https://a_b.example/inbox",
    "https://a.example]/inbox",
    "https://a.example[/inbox",
    # percent-encoding and backslashes
    "https://a.example/%20x",
    "https://a.example/%",
    "https://%41.example/inbox",
    "https://a%2eexample/inbox",
    "https://a.example\\inbox",
    "https://a.example/\\",
    "https:\\\\a.example\\inbox",
]


def reference(inboxes: Iterable[object]) -> list[str]:
    """``clean_inboxes`` without the fast path: the full check of each inbox."""
    seen: dict[str, None] = {}
    for inbox in inboxes:
        seen.setdefault(parse_target(inbox, 2048).url, None)  # type: ignore[arg-type]
    return list(seen)


#: Every address allowed: these tests are about reading URLs (the test_send_hostile_hosts
#: tests are about the addresses refused).
EVERYWHERE = parse_networks(["0.0.0.0/0", "::/0"])


def clean(inboxes: object) -> list[str]:
    return clean_inboxes(inboxes, MAX_INBOXES, EVERYWHERE)


class Unhashable:
    """An item whose hash fails with something other than TypeError."""

    def __hash__(self) -> int:
        raise RuntimeError("no hash")


def outcome(function: Callable[..., object], *args: object) -> tuple[str, object]:
    """What a call returned, or the type and message of what it raised (compared)."""
    try:
        return ("ok", function(*args))
    except Exception as error:
        return (type(error).__name__, str(error))


def assert_same(inboxes: Sequence[object]) -> None:
    """The fast and full checks agree on ``inboxes`` as a list, a tuple and a generator."""
    expected = outcome(reference, inboxes)
    assert outcome(clean, inboxes) == expected, inboxes
    assert outcome(clean, tuple(inboxes)) == expected, inboxes
    assert outcome(clean, (i for i in inboxes)) == expected, inboxes


def assert_agree(url: str) -> None:
    """One URL: same verdict alone and after a good one; the fast path only accepts."""
    if well_formed_lines(url):
        assert parse_target(url).url == url  # the fast path takes canonical URLs only
    assert_same([url])
    assert_same([GOOD, url, GOOD])
    assert outcome(inbox_host, url) == outcome(lambda u: parse_target(u).host, url)


@pytest.mark.parametrize("url", TRICKY)
def test_tricky_urls_get_the_full_checks_verdict(url: str) -> None:
    assert_agree(url)


@pytest.mark.skipif(not target.FAST_PATH_ON, reason="this Python's re: no fast path")
def test_the_fast_path_takes_the_common_urls() -> None:
    accepted = [u for u in TRICKY if well_formed_lines(u)]
    assert GOOD in accepted
    assert "https://1.2.3.4:8080/inbox" in accepted
    assert "https://a.example:65535/inbox" in accepted
    assert "https://a.example:65536/inbox" not in accepted
    assert "https://a.example:0/inbox" not in accepted
    assert "https://[::1]:8080/inbox" not in accepted  # canonical, but left to the parser
    assert inbox_host("https://[FE80::A:1]:8080/x") == "fe80::a:1"
    assert inbox_host("HTTPS://Mastodon.Example/inbox") == "mastodon.example"


def test_without_the_fast_path_every_url_gets_the_full_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As on a Python whose ``re`` gets possessive quantifiers wrong (before 3.11.5):
    nothing is taken by the fast path, and every verdict is still the full checks'."""
    monkeypatch.setattr(target, "FAST_PATH_ON", False)
    target._fast_patterns.cache_clear()
    try:
        assert not well_formed_lines(GOOD)
        assert target.canonical_host(GOOD) is None
        assert inbox_host("HTTPS://Mastodon.Example/inbox") == "mastodon.example"
        for url in TRICKY:
            assert_agree(url)
        with pytest.raises(InvalidInbox, match="empty port"):
            clean(["https://a.example:/inbox"])
    finally:
        target._fast_patterns.cache_clear()


def test_inboxes_are_stored_in_canonical_form_and_spellings_are_one_inbox() -> None:
    spellings = [
        "HTTPS://Mastodon.Example:443/users/alice/inbox",
        GOOD,
        "https://mastodon.example/users/./alice/inbox",
    ]
    assert clean(spellings) == [GOOD]


def test_order_and_duplicates_are_kept() -> None:
    urls = ["https://b.example/i", "https://a.example/i", "https://b.example/i", "https://c/i"]
    expected = ["https://b.example/i", "https://a.example/i", "https://c/i"]
    assert clean(urls) == expected
    assert clean(iter(urls)) == expected
    assert clean([]) == [] and clean(iter([])) == []


@pytest.mark.parametrize(
    "inboxes",
    [
        [GOOD, "https://a.example/x\nhttps://b.example/y"],
        [GOOD, "https://a.example/x#y", "ftp://b.example/"],
        [GOOD, 42, "ftp://b.example/"],
        [GOOD, "ftp://b.example/", 42],
        [GOOD, None],
        [GOOD, b"https://a.example/inbox"],
        [GOOD, ["https://a.example/inbox"]],
        [GOOD, "ftp://b.example/", ["https://a.example/inbox"]],
        [GOOD, "ftp://b.example/", Unhashable()],
        [GOOD, Unhashable(), "ftp://b.example/"],
        [GOOD, "", GOOD],
        [GOOD, "https://a.example/" + "x" * 10_000],
    ],
)
def test_lists_fail_on_their_first_bad_inbox(inboxes: list[object]) -> None:
    assert_same(inboxes)


def test_a_single_string_is_refused() -> None:
    for value in (GOOD, GOOD.encode()):
        with pytest.raises(InvalidInbox, match="not a single string"):
            clean(value)


def test_generated_ipv6_hosts() -> None:
    rng = random.Random(SEED)
    for _ in range(1000):
        address = ipaddress.IPv6Address(rng.getrandbits(128) >> rng.choice((0, 16, 64, 96, 112)))
        ipv4 = ipaddress.IPv4Address(rng.getrandbits(32))
        for text in (
            str(address),
            address.exploded.upper(),
            f"::ffff:{ipv4}",
            f"{address.exploded[:29]}:{ipv4}",
        ):
            port = rng.randrange(1, 65536)
            url = f"https://[{text}]:{port}/inbox"
            assert_agree(url)
            assert_agree(mutate(rng, url))


PIECES = [
    "http", "https", "HTTP", "ftp", ":", "//", "/", "?", "#", "@", "[", "]", "%", "\\",
    "::", "1", "0", "65535", "65536", "255", "256", "ffff", "a", "Z", ".", "-", "_",
    "example", "inbox", " ", "\t", "\n", "\r", "\x00", "\x7f", "\u00fc", "\u212a",
    "\u2100", "\uff10", "\u0663", "v1", "&", "=", "~", "'",
]  # fmt: skip
CHARS = "".join(sorted({c for piece in PIECES for c in piece}))


def mutate(rng: random.Random, url: str) -> str:
    """``url`` with a few characters inserted, deleted or replaced."""
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(url) + 1)
        action = rng.randrange(3)
        insert = rng.choice(PIECES) if rng.random() < 0.5 else rng.choice(CHARS)
        if action == 0:
            url = url[:at] + insert + url[at:]
        elif action == 1:
            url = url[:at] + url[at + 1 :]
        else:
            url = url[:at] + insert + url[at + 1 :]
    return url


def test_generated_urls_get_the_full_checks_verdict() -> None:
    rng = random.Random(SEED)
    seeds = [u for u in TRICKY if u] + [
        "https://h1.example.net:8443/users/u1/inbox?x=1",
        "http://[2001:db8::7]:80/inbox",
        "https://10.0.0.1/inbox",
    ]
    for _ in range(6000):
        url = mutate(rng, rng.choice(seeds))
        assert_agree(url)
        composed = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
        assert_agree(composed)
    batch = [mutate(rng, rng.choice(seeds)) for _ in range(200)]
    assert_same(batch)
    assert_same([u for u in batch if well_formed_lines(u)] * 2)

"""parse_target: the one reading of an inbox URL, and the fast path that send() uses."""

from __future__ import annotations

import ipaddress
import itertools
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from django_outbox.exceptions import InvalidInbox, InvalidSend
from django_outbox.transport.target import (
    DEFAULT_MAX_LENGTH,
    FAST_PATH_ON,
    canonical_host,
    parse_target,
    well_formed_lines,
)
from tests.support.inbox_url_samples import (
    ACCEPTED,
    FAST_CANDIDATES,
    FAST_HOSTS,
    FAST_PATHS,
    FAST_PORTS,
    FAST_SCHEMES,
    HOSTILE_URLS,
    TYPICAL,
    VALID_URLS,
    assert_consistent,
)

#: The tests of what the fast path takes; without it (Python before 3.11.5) it takes
#: nothing, and the consistency tests check that every verdict is still the parser's.
NEEDS_FAST_PATH = pytest.mark.skipif(not FAST_PATH_ON, reason="this Python's re: no fast path")


@pytest.mark.parametrize(("url", "host", "port", "path", "canonical"), ACCEPTED)
def test_accepted(url: str, host: str, port: int, path: str, canonical: str) -> None:
    target = parse_target(url)
    assert (target.host, target.port, target.path, target.url) == (host, port, path, canonical)
    assert_consistent(target)


def test_host_header_and_origin() -> None:
    target = parse_target("https://Example.com:8443/inbox")
    assert target.scheme == "https"
    assert target.host_header == "example.com:8443"
    assert target.origin == "https://example.com:8443"
    assert parse_target("http://[::1]/").host_header == "[::1]"
    assert parse_target("http://[::1]:81/").host_header == "[::1]:81"
    assert parse_target("https://example.com:443/").host_header == "example.com"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/", "is not an http(s) URL"),
        ("mailto:a@example.com", "is not an http(s) URL"),
        ("example.com/inbox", "is not an absolute http(s) URL"),
        ("/inbox", "is not an absolute http(s) URL"),
        ("", "is not an absolute http(s) URL"),
        ("http:/example.com/", "has no host"),
        ("http:example.com", "has no host"),
        ("http:///inbox", "has no host"),
        ("http://:80/", "has no host"),
        ("https://user:pass@example.com/", "carries credentials"),
        ("https://user@example.com/", "carries credentials"),
        ("https://example.com/#frag", "has a fragment"),
        ("https://example.com/inbox#", "has a fragment"),
        ("http://h\\.example/inbox", "contains a backslash"),
        ("https://example.com/a\\b", "contains a backslash"),
        ("https://example.com/a b", "contains a space"),
        (" https://example.com/", "contains a space"),
        ("https://example.com/\r\nX-Evil: 1", "control character U+000D"),
        ("https://example.com/\n", "control character U+000A"),
        ("https://example.com/\t", "control character U+0009"),
        ("https://example.com/\x00", "control character U+0000"),
        ("https://example.com/\x7f", "control character U+007F"),
        ("https://example.com/\x85", "control character U+0085"),
        ("https://a..b/", "empty label"),
        ("https://.bad.example/", "empty label"),
        ("https://example.com./", "ending in a dot"),
        ("https://" + "a" * 64 + ".example/", "longer than 63"),
        ("https://" + ".".join(["a" * 60] * 5) + "/", "longer than 253"),
        ("https://-a.example/", "invalid host label '-a'"),
        ("https://a-.example/", "invalid host label 'a-'"),
        ("https://a%41.example/", "invalid host label"),
        ("https://a[b.example/", "invalid host label"),
        ("https://xn--abc.example/", "invalid IDNA A-label 'xn--abc'"),
        ("https://xn--.example/", "invalid host label 'xn--'"),
        ("https://xn--a.example/", "invalid IDNA A-label"),
        ("https://ex\uff0fample.com/", "it stands for the ASCII 'ex/ample'"),
        # UTS 46 maps these to ASCII names; IDNA 2008 refuses the characters.
        ("https://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3/inbox", "'localhost'"),
        ("https://example\u3002com/", "it stands for the ASCII 'example.com'"),
        ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", "it stands for the ASCII '127'"),
        ("https://\u212aelvin.example/", "it stands for the ASCII 'kelvin'"),
        ("https://b\u00fccher.\u24dbocal/", "it stands for the ASCII 'local'"),
        ("https://\u0663\u0041.example/", "not valid IDNA"),
        ("https://a\u200db.example/", "not valid IDNA"),
        ("http://127.1/", "not in dotted-quad form"),
        ("http://0x7f.1/", "not in dotted-quad form"),
        ("http://0x7f.0.0.1/", "not in dotted-quad form"),
        ("http://0177.0.0.1/", "not in dotted-quad form"),
        ("http://127.0.0.01/", "not in dotted-quad form"),
        ("http://2130706433/", "not in dotted-quad form"),
        ("http://256.1.1.1/", "not in dotted-quad form"),
        ("http://example.0x/", "not in dotted-quad form"),
        ("http://[fe80::1%25eth0]/", "zone id"),
        ("http://[fe80::1%eth0]/", "zone id"),
        ("http://[v1.fe]/", "invalid IPv6 address"),
        ("http://[::1/", "unclosed '['"),
        ("http://[::1]x/", "characters after its IPv6 address"),
        ("http://[1::2::3]/", "invalid IPv6 address"),
        ("http://[::ffff:01.2.3.4]/", "invalid IPv6 address"),
        ("http://::1/", "has no host"),
        ("http://h:1:2/", "port that is not a number"),
        ("https://example.com:0/", "out of range"),
        ("https://example.com:65536/", "out of range"),
        ("https://example.com:000443/", "out of range"),
        ("https://example.com:-1/", "not a number"),
        ("https://example.com:8a/", "not a number"),
        ("https://example.com:\u0668\u0660/", "not a number"),
        ("https://example.com:/", "empty port"),
        ("https://example.com/100%", "'%' that starts no percent-escape"),
        ("https://example.com/?q=%zz", "'%' that starts no percent-escape"),
        ("https://example.com/\ud800", "not valid Unicode"),
    ],
)
def test_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidInbox, match=re.escape(message)):
        parse_target(url)


def test_invalid_inbox_is_a_value_error_and_an_invalid_send() -> None:
    with pytest.raises(InvalidSend):
        parse_target("ftp://example.com/")
    with pytest.raises(ValueError, match="is not an http"):
        parse_target("ftp://example.com/")


@pytest.mark.parametrize("value", [None, b"https://example.com/", ["https://example.com/"], 7])
def test_not_a_string(value: object) -> None:
    with pytest.raises(InvalidInbox, match="is not a string"):
        parse_target(value)  # type: ignore[arg-type]


def test_max_length() -> None:
    base = "https://example.com/"
    at_limit = base + "a" * (DEFAULT_MAX_LENGTH - len(base))
    assert parse_target(at_limit).url == at_limit
    with pytest.raises(InvalidInbox, match="longer than 2048 characters"):
        parse_target(at_limit + "a")
    assert parse_target(base + "a" * 80, max_length=100).url == base + "a" * 80
    with pytest.raises(InvalidInbox, match="longer than 50 characters"):
        parse_target(base + "a" * 80, max_length=50)
    # Under the limit as given, over it once quoted.
    with pytest.raises(InvalidInbox, match="once percent-encoded"):
        parse_target(base + "ü" * 20, max_length=100)


def test_long_urls_are_cut_short_in_messages() -> None:
    with pytest.raises(InvalidInbox) as raised:
        parse_target("ftp://" + "a" * 5000)
    assert len(str(raised.value)) < 200


@settings(max_examples=500)
@given(VALID_URLS)
def test_valid_urls_accepted_and_read_alike_by_urllib3(url: str) -> None:
    assert_consistent(parse_target(url))


@settings(max_examples=1000)
@given(HOSTILE_URLS | st.text())
@example("http://h\\.example/inbox")
@example("http://[::1]:/")
@example("http://a@b@c/")
@example("http://example.com/%2e%2e/x")
def test_any_text_read_alike_or_refused(url: str) -> None:
    try:
        target = parse_target(url)
    except InvalidInbox:
        return
    assert_consistent(target)


@given(st.integers(0, 2**128 - 1))
def test_ipv6_hosts_in_rfc_5952_form(value: int) -> None:
    address = ipaddress.IPv6Address(value)
    host = parse_target(f"http://[{address.exploded}]/").host
    assert ipaddress.IPv6Address(host) == address
    if address.ipv4_mapped is None:  # Python 3.13 writes those with a dotted quad
        assert host == str(address)
    assert parse_target(f"http://[{host}]/").host == host


@NEEDS_FAST_PATH
@pytest.mark.parametrize("url", TYPICAL)
def test_fast_path_takes_typical_inboxes(url: str) -> None:
    assert canonical_host(url) == parse_target(url).host
    assert parse_target(url).url == url


def test_fast_path_leaves_the_rest_to_the_parser() -> None:
    for url in (
        "https://Example.com/",
        "https://example.com",
        "https://example.com:443/",
        "https://example.com/./a",
        "https://example.com/%2f",
        "https://xn--bcher-kva.de/",
        "https://[::1]/",
        "https://example.123/",
        "https://bücher.de/",
        "https://a-.b/",
        "https://b.a-/",
        "https://-a.b/",
        "https://1.2.3.04/",
        "https://h.0x1/",
    ):
        assert canonical_host(url) is None, url
        assert not well_formed_lines(url), url


@NEEDS_FAST_PATH
def test_fast_path_on_every_combination() -> None:
    taken = 0
    for parts in itertools.product(FAST_SCHEMES, FAST_HOSTS, FAST_PORTS, FAST_PATHS, FAST_PATHS):
        url = "".join(parts)
        host = canonical_host(url)
        if host is not None:
            taken += 1
            target = parse_target(url)
            assert (target.url, target.host) == (url, host)
        assert well_formed_lines(url) == (host is not None)
    assert taken > 1000  # the fast path is not vacuous


@settings(max_examples=1000)
@given(FAST_CANDIDATES | VALID_URLS | HOSTILE_URLS)
def test_fast_path_only_takes_canonical_urls(url: str) -> None:
    host = canonical_host(url)
    if host is not None:
        target = parse_target(url)
        assert target.url == url
        assert target.host == host
    assert well_formed_lines(url) == (host is not None)


@given(st.lists(FAST_CANDIDATES | st.sampled_from(TYPICAL), min_size=1, max_size=8))
def test_fast_path_on_lines_is_all_of_its_lines(urls: list[str]) -> None:
    assert well_formed_lines("\n".join(urls)) == all(canonical_host(url) for url in urls)


@NEEDS_FAST_PATH
def test_fast_path_honours_max_length() -> None:
    url = "https://example.com/" + "a" * 80
    assert canonical_host(url, max_length=len(url)) == "example.com"
    assert canonical_host(url, max_length=len(url) - 1) is None
    assert well_formed_lines(f"{url}\n{url}", max_length=len(url))
    assert not well_formed_lines(f"{url}\n{url}a", max_length=len(url))


def test_fast_path_refuses_empty_and_trailing_lines() -> None:
    assert not well_formed_lines("")
    assert not well_formed_lines("https://example.com/\n")
    assert not well_formed_lines("https://example.com/\n\nhttps://example.com/")

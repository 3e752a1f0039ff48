"""Inbox URLs for the parser's tests: examples, and hypothesis strategies that build them."""

from __future__ import annotations

from hypothesis import strategies as st
from urllib3.util import parse_url

from django_outbox.transport.target import DEFAULT_PORTS, Target, canonical_host, parse_target

# Accepted: (URL, host, port, request target, canonical URL).
ACCEPTED = [
    ("https://example.com/inbox", "example.com", 443, "/inbox", "https://example.com/inbox"),
    ("HTTPS://Example.COM/Inbox", "example.com", 443, "/Inbox", "https://example.com/Inbox"),
    ("https://example.com", "example.com", 443, "/", "https://example.com/"),
    ("http://example.com?x=1", "example.com", 80, "/?x=1", "http://example.com/?x=1"),
    ("https://example.com/?", "example.com", 443, "/?", "https://example.com/?"),
    ("https://example.com:443/a", "example.com", 443, "/a", "https://example.com/a"),
    ("http://example.com:0080/a", "example.com", 80, "/a", "http://example.com/a"),
    ("http://example.com:443/a", "example.com", 443, "/a", "http://example.com:443/a"),
    ("https://h.example:8443/a", "h.example", 8443, "/a", "https://h.example:8443/a"),
    (
        "https://bücher.de/ü?q=ü",
        "xn--bcher-kva.de",
        443,
        "/%C3%BC?q=%C3%BC",
        "https://xn--bcher-kva.de/%C3%BC?q=%C3%BC",
    ),
    ("https://BÜCHER.de/", "xn--bcher-kva.de", 443, "/", "https://xn--bcher-kva.de/"),
    ("https://faß.de/", "xn--fa-hia.de", 443, "/", "https://xn--fa-hia.de/"),
    ("https://xn--bcher-kva.de/", "xn--bcher-kva.de", 443, "/", "https://xn--bcher-kva.de/"),
    (
        "https://r3---sn-abc.googlevideo.com/",
        "r3---sn-abc.googlevideo.com",
        443,
        "/",
        "https://r3---sn-abc.googlevideo.com/",
    ),
    ("https://my_host.example/", "my_host.example", 443, "/", "https://my_host.example/"),
    ("http://localhost:8000/inbox", "localhost", 8000, "/inbox", "http://localhost:8000/inbox"),
    ("http://127.0.0.1:8000/x", "127.0.0.1", 8000, "/x", "http://127.0.0.1:8000/x"),
    ("http://[::1]:8080/x", "::1", 8080, "/x", "http://[::1]:8080/x"),
    ("http://[2001:DB8:0:0:1:0:0:1]/", "2001:db8::1:0:0:1", 80, "/", "http://[2001:db8::1:0:0:1]/"),
    ("http://[::ffff:1.2.3.4]/", "::ffff:102:304", 80, "/", "http://[::ffff:102:304]/"),
    ("https://example.com/a/./b/../c", "example.com", 443, "/a/c", "https://example.com/a/c"),
    ("https://example.com/a/..", "example.com", 443, "/", "https://example.com/"),
    ("https://example.com/../../x", "example.com", 443, "/x", "https://example.com/x"),
    (
        "https://example.com/.well-known/apgateway/did:key:z6Mk/actor/inbox",
        "example.com",
        443,
        "/.well-known/apgateway/did:key:z6Mk/actor/inbox",
        "https://example.com/.well-known/apgateway/did:key:z6Mk/actor/inbox",
    ),
    (
        "https://example.com/a%2fb%7e",
        "example.com",
        443,
        "/a%2Fb%7E",
        "https://example.com/a%2Fb%7E",
    ),
    (
        'https://example.com/<>"{}|^`[]',
        "example.com",
        443,
        "/%3C%3E%22%7B%7D%7C%5E%60%5B%5D",
        "https://example.com/%3C%3E%22%7B%7D%7C%5E%60%5B%5D",
    ),
    (
        "https://example.com/@alice/inbox?a=@b&c=/d?e",
        "example.com",
        443,
        "/@alice/inbox?a=@b&c=/d?e",
        "https://example.com/@alice/inbox?a=@b&c=/d?e",
    ),
    ("https://example.com//inbox", "example.com", 443, "//inbox", "https://example.com//inbox"),
    (
        "https://example.com/a?b/../c",
        "example.com",
        443,
        "/a?b/../c",
        "https://example.com/a?b/../c",
    ),
]

# Typical inboxes, already canonical: the fast path must take every one.
TYPICAL = [
    "https://mastodon.social/inbox",
    "https://mastodon.social/users/Gargron/inbox",
    "https://lemmy.world/c/technology/inbox",
    "https://misskey.io/users/9abcdef123/inbox",
    "https://pixelfed.social/users/dansup/inbox",
    "https://example.com:8443/inbox?token=a%2Fb",
    "http://127.0.0.1:8000/inbox",
    "https://sub.domain-with-hyphens.example/u/@alice/inbox",
    "https://example.com/.well-known/apgateway/did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6/inbox",
]

DEFAULT_SCHEMES = st.sampled_from(["http://", "https://", "HTTP://", "hTtPs://"])
_HOSTILE = [
    "\\",
    "%",
    "%2",
    "%2f",
    "%41",
    "%zz",
    "%25",
    "@",
    "#",
    "?",
    "/",
    "//",
    ".",
    "..",
    "/./",
    "/../",
    ":",
    ":80",
    ":0",
    ":65536",
    "[",
    "]",
    "[::1]",
    "[fe80::1%25eth0]",
    "xn--",
    "xn--bcher-kva",
    "ü",
    "ß",
    "\u3002",
    "\uff0e",
    "\u00ad",
    "\u200d",
    "\u202e",
    "\uff11",
    "\uff0f",
    "\x00",
    "\t",
    "\n",
    "\r",
    " ",
    "\x7f",
    "\x85",
    "\ud800",
    "0x7f",
    "127",
    "0",
    "1",
    "-",
    "_",
    "a",
    "B",
    "example",
    "com",
    "80",
    "443",
    "0177",
    "2130706433",
    "user:pass@",
]
_CHUNK = st.sampled_from(_HOSTILE) | st.text(max_size=3)
SCHEMES = DEFAULT_SCHEMES | st.sampled_from(["http:", "http:/", "ftp://", "", "//", "http:///"])
HOSTILE_URLS = st.builds(
    lambda scheme, authority, rest: scheme + authority + rest,
    SCHEMES,
    st.lists(_CHUNK, max_size=6).map("".join),
    st.lists(_CHUNK, max_size=8).map("".join),
)

_ASCII_LABEL = st.from_regex(r"[a-zA-Z0-9](?:[a-zA-Z0-9_-]{0,8}[a-zA-Z0-9])?", fullmatch=True)
_UNICODE_LABEL = st.text(alphabet="abcxyzüéßöñçÅÉ", min_size=1, max_size=8)
_LAST_LABEL = st.from_regex(r"[a-zA-Z][a-zA-Z0-9]{0,6}", fullmatch=True) | _UNICODE_LABEL
_NAME = st.builds(
    lambda labels, last: ".".join([*labels, last]),
    st.lists(_ASCII_LABEL | _UNICODE_LABEL, max_size=3),
    _LAST_LABEL,
)
_IPV6 = st.ip_addresses(v=6).flatmap(
    lambda ip: st.sampled_from([f"[{ip}]", f"[{ip.exploded}]", f"[{ip.exploded.upper()}]"])
)
HOSTS = _NAME | st.ip_addresses(v=4).map(str) | _IPV6
PORTS = st.none() | st.integers(1, 65535)
_PATH_CHARS = [
    *"abcXYZ019-._~!$&'()*+,;=:@",
    "%2F",
    "%2f",
    "%41",
    "ü",
    '"',
    "<",
    "{",
    "|",
    "^",
    "`",
    "[",
    "]",
    "\u00e9",
]
_SEGMENTS = st.lists(st.sampled_from(_PATH_CHARS), max_size=5).map("".join) | st.sampled_from(
    [".", "..", ""]
)
PATHS = st.lists(_SEGMENTS, max_size=5).map(lambda segments: "".join("/" + s for s in segments))
QUERIES = st.none() | st.lists(st.sampled_from([*_PATH_CHARS, "?", "/"]), max_size=6).map("".join)


def _url(scheme: str, host: str, port: int | None, path: str, query: str | None) -> str:
    authority = host if port is None else f"{host}:{port}"
    return scheme + authority + path + ("" if query is None else "?" + query)


VALID_URLS = st.builds(_url, DEFAULT_SCHEMES, HOSTS, PORTS, PATHS, QUERIES)

_LONG = ".".join(["a" * 63] * 3)  # 191 characters
FAST_HOSTS = [
    "example.com",
    "a.b.c",
    "a--b.c",
    "a_b.c",
    "_.c",
    "c._",
    "xn--bcher-kva.de",
    "xn--a.b",
    "a.xn--p1ai",
    "EXAMPLE.com",
    "1.2.3.4",
    "255.255.255.255",
    "01.2.3.4",
    "1.2.3.04",
    "256.1.1.1",
    "1.2.3.4.5",
    "1.2.3",
    "h.123",
    "h.0x1",
    "0x1",
    "a-.b",
    "-a.b",
    "b.a-",
    "b.-a",
    "a" * 63 + ".c",
    "a" * 64 + ".c",
    _LONG + "." + "a" * 61,
    _LONG + "." + "a" * 62,
    "[::1]",
    "a..b",
    ".a.b",
    "a.b.",
]
FAST_SCHEMES = ["http://", "https://", "HTTP://"]
FAST_PORTS = ["", ":8080", ":80", ":443", ":0", ":1", ":65535", ":65536", ":080"]
FAST_PATHS = [
    "/",
    "/a",
    "/inbox",
    "/.",
    "/..",
    "/.a",
    "/..b",
    "/...",
    "/%2F",
    "/%2f",
    "/%",
    "/%4",
    "/~",
    "/ü",
    '/"',
    "?",
    "?q",
    "?%41",
    "?%4a",
    "?/..",
    "/a/./b",
    "/a/..",
]
FAST_CANDIDATES = st.builds(
    lambda scheme, host, port, path: scheme + host + port + path,
    st.sampled_from(FAST_SCHEMES),
    st.sampled_from(FAST_HOSTS) | _NAME,
    st.sampled_from(FAST_PORTS),
    st.lists(st.sampled_from(FAST_PATHS), min_size=1, max_size=4).map("".join),
)


def assert_consistent(target: Target) -> None:
    """The Target reads back from its URL, and urllib3 reads the same URL the same way."""
    assert parse_target(target.url) == target
    assert target.url == target.origin + target.path
    assert target.origin == f"{target.scheme}://{target.host_header}"
    parsed = parse_url(target.url)
    host = parsed.host or ""
    assert parsed.scheme == target.scheme
    assert (host[1:-1] if host.startswith("[") else host) == target.host
    assert (parsed.port or DEFAULT_PORTS[target.scheme]) == target.port
    assert parsed.request_uri == target.path
    assert parsed.url == target.url
    assert canonical_host(target.url) in (None, target.host)

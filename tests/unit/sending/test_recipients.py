"""collapse: recipients to delivery targets, shared inboxes first, own hosts left out."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from django_outbox.exceptions import InvalidInbox, InvalidSend
from django_outbox.sending.recipients import InvalidRecipient, Recipient, collapse


@dataclass
class Actor:
    """An application's actor model, as collapse reads it."""

    name: str
    inbox: str | None
    shared_inbox: str | None


ALICE = Recipient("https://a.example/users/alice/inbox", "https://a.example/inbox")
BOB = Recipient("https://a.example/users/bob/inbox", "https://a.example/inbox")
CAROL = Recipient("https://c.example/users/carol/inbox")
DAVE = Recipient("https://d.example/users/dave/inbox", "https://d.example/inbox")


# Sharing and order --------------------------------------------------------------


def test_recipients_with_a_shared_inbox_collapse_to_it_once_in_first_order() -> None:
    assert collapse([CAROL, ALICE, DAVE, BOB, CAROL]) == [
        "https://c.example/users/carol/inbox",
        "https://a.example/inbox",
        "https://d.example/inbox",
    ]


def test_without_sharing_every_recipient_keeps_its_inbox() -> None:
    assert collapse([ALICE, BOB, CAROL, ALICE], prefer_shared_inbox=False) == [
        ALICE.inbox,
        BOB.inbox,
        CAROL.inbox,
    ]


def test_plain_urls_are_inboxes_deduplicated_in_order() -> None:
    urls = ["https://x.example/i", "https://y.example/i", "https://x.example/i"]
    assert collapse(urls) == ["https://x.example/i", "https://y.example/i"]
    assert collapse(iter(urls)) == ["https://x.example/i", "https://y.example/i"]
    assert collapse([]) == []


def test_urls_recipients_and_models_mix() -> None:
    model = Actor("erin", "https://e.example/users/erin", "https://a.example/inbox")
    assert collapse(["https://a.example/inbox", ALICE, model, CAROL.inbox, CAROL]) == [
        "https://a.example/inbox",
        CAROL.inbox,
    ]


def test_any_object_with_the_two_attributes_is_a_recipient() -> None:
    assert collapse([SimpleNamespace(inbox="https://s.example/u/1", shared_inbox=None)]) == [
        "https://s.example/u/1"
    ]
    assert collapse([SimpleNamespace(inbox="https://s.example/u/1")]) == ["https://s.example/u/1"]


def test_a_blank_shared_inbox_counts_as_none() -> None:
    assert collapse([Actor("f", "https://f.example/u/f", "")]) == ["https://f.example/u/f"]


def test_a_recipient_with_only_a_shared_inbox_is_reached_through_it() -> None:
    only_shared = Actor("g", None, "https://g.example/inbox")
    blank_inbox = Actor("h", "", "https://h.example/inbox")
    for prefer in (True, False):
        assert collapse([only_shared, blank_inbox], prefer_shared_inbox=prefer) == [
            "https://g.example/inbox",
            "https://h.example/inbox",
        ]


# Excluded hosts -----------------------------------------------------------------


def test_recipients_on_an_excluded_host_are_dropped() -> None:
    local = Recipient("https://local.example/users/me/inbox", "https://local.example/inbox")
    plain = "https://LOCAL.example:8443/users/you/inbox"
    assert collapse([local, plain, CAROL, ALICE], exclude_hosts={"local.example"}) == [
        CAROL.inbox,
        "https://a.example/inbox",
    ]


def test_host_names_are_compared_in_lower_case_without_port() -> None:
    urls = ["https://Local.Example/u/1", "http://local.example:80/u/2", "https://b.example/"]
    for entry in ("local.example", "LOCAL.EXAMPLE", "https://Local.Example:8443/"):
        assert collapse(urls, exclude_hosts=[entry]) == ["https://b.example/"]


def test_a_host_that_only_contains_an_excluded_name_is_kept() -> None:
    urls = [
        "https://local.example.evil.test/inbox",
        "https://notlocal.example/inbox",
        "https://b.example/local.example/inbox",
        "https://b.example/?local.example",
        "https://local.example@b.example/inbox",
    ]
    assert collapse(urls, exclude_hosts={"local.example"}) == urls


def test_a_shared_inbox_on_an_excluded_host_is_never_a_target() -> None:
    relayed = Recipient("https://r.example/users/rob/inbox", "https://local.example/inbox")
    lonely = Actor("l", None, "https://local.example/inbox")
    assert collapse([relayed, lonely], exclude_hosts={"local.example"}) == [relayed.inbox]


def test_ip_addresses_and_urls_without_a_path_are_excluded_by_host() -> None:
    urls = ["https://[::1]:8443", "http://127.0.0.1", "https://[::1]/inbox", "https://b.example"]
    assert collapse(urls, exclude_hosts=["[::1]", "127.0.0.1"]) == ["https://b.example"]
    assert collapse(urls, exclude_hosts=["::1"]) == ["http://127.0.0.1", "https://b.example"]


def test_a_tab_in_a_url_does_not_hide_its_host() -> None:
    # urlsplit deletes tabs and line breaks, so this URL's host is local.example.
    assert collapse(["https://loc\tal.example/inbox"], exclude_hosts={"local.example"}) == []


def test_non_ascii_hosts_are_compared_as_urlsplit_lower_cases_them() -> None:
    assert collapse(["https://B\u00dcCHER.example/i"], exclude_hosts={"b\u00fccher.example"}) == []
    # The Kelvin sign lower-cases to an ASCII "k".
    assert collapse(["https://\u212a.example/i"], exclude_hosts={"k.example"}) == []
    # And an excluded name is lower-cased the same way.
    assert collapse(["https://k.example/i"], exclude_hosts={"\u212a.example"}) == []


def test_urls_that_are_not_http_are_judged_whole() -> None:
    urls = ["HTTPS://LOCAL.EXAMPLE/i", "ftp://local.example/i", "local.example/i", "ap://x/y"]
    assert collapse(urls, exclude_hosts={"local.example"}) == ["local.example/i", "ap://x/y"]


def test_a_url_whose_host_cannot_be_read_raises_when_it_matters() -> None:
    with pytest.raises(InvalidRecipient, match="cannot tell the host"):
        collapse(["https://[local.example/inbox"], exclude_hosts={"local.example"})


@pytest.mark.parametrize("entries", ["local.example", b"local.example", [None], [""], [3]])
def test_exclude_hosts_must_be_a_collection_of_names(entries: object) -> None:
    with pytest.raises(InvalidRecipient, match="exclude_hosts"):
        collapse([CAROL], exclude_hosts=entries)  # type: ignore[arg-type]


def test_an_excluded_url_must_have_a_host() -> None:
    with pytest.raises(InvalidRecipient, match="exclude_hosts holds 'https://'"):
        collapse([CAROL], exclude_hosts=["https://"])


# Bad recipients -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("recipient", "message"),
    [
        pytest.param(None, "a recipient is None", id="None"),
        pytest.param("", "empty string", id="empty string"),
        pytest.param(object(), "has no inbox nor shared_inbox", id="no attributes"),
        pytest.param({"inbox": "https://x.example/i"}, "has no inbox", id="dict"),
        pytest.param(Actor("n", None, None), "has no inbox nor shared_inbox", id="both None"),
        pytest.param(Actor("b", "", ""), "has no inbox nor shared_inbox", id="both blank"),
        pytest.param(
            Actor("i", 7, None),  # type: ignore[arg-type]
            "inbox of .* is not a string: 7",
            id="int inbox",
        ),
        pytest.param(
            Actor("s", "https://x.example/i", b"https://x.example/s"),  # type: ignore[arg-type]
            "shared inbox of .* is not a string",
            id="bytes shared inbox",
        ),
        pytest.param(
            SimpleNamespace(inbox=["https://x.example/i"], shared_inbox=None),
            "inbox of .* is not a string",
            id="list inbox",
        ),
    ],
)
def test_bad_recipients_raise_a_typed_error(recipient: object, message: str) -> None:
    with pytest.raises(InvalidRecipient, match=message) as caught:
        collapse([CAROL, recipient])  # type: ignore[list-item]
    assert isinstance(caught.value, InvalidInbox)
    assert isinstance(caught.value, InvalidSend)
    assert isinstance(caught.value, ValueError)


def test_a_single_string_is_not_a_list_of_recipients() -> None:
    with pytest.raises(InvalidRecipient, match="not a single string"):
        collapse("https://x.example/inbox")


def test_a_long_recipient_is_shown_shortened() -> None:
    long = SimpleNamespace(inbox=None, shared_inbox=None, name="x" * 1000)
    with pytest.raises(InvalidRecipient) as caught:
        collapse([long])
    assert len(str(caught.value)) < 300


# Properties ---------------------------------------------------------------------

# A few hosts, so that recipients share hosts and shared inboxes; some spelled
# oddly (case, non-ASCII, an IP address) to exercise the host comparison.
HOSTS = ["a.example", "B.example", "local.example", "Local.Example", "127.0.0.1", "\u00fc.example"]
EXCLUDABLE = ["local.example", "LOCAL.example", "b.example", "127.0.0.1", "\u00fc.example", "zz"]


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["https", "http"]))
    host = draw(st.sampled_from(HOSTS))
    port = draw(st.sampled_from(["", ":8443", ":80"]))
    path = draw(st.sampled_from(["", "/inbox", "/users/u1/inbox", "/users/u2/inbox", "?q=1"]))
    return f"{scheme}://{host}{port}{path}"


recipients = st.one_of(
    urls(),
    st.builds(Recipient, urls(), st.none() | urls()),
    st.builds(Actor, st.just("m"), st.none() | st.just("") | urls(), urls()),
)


def host(url: str) -> str | None:
    return urlsplit(url).hostname


def own(recipient: str | Recipient | Actor) -> tuple[str, str | None]:
    if isinstance(recipient, str):
        return recipient, None
    return recipient.inbox or "", recipient.shared_inbox or None


@settings(max_examples=300, deadline=None)
@given(
    given_recipients=st.lists(recipients, max_size=40),
    prefer=st.booleans(),
    exclude=st.lists(st.sampled_from(EXCLUDABLE), max_size=3),
)
def test_collapse_properties(
    given_recipients: list[str | Recipient | Actor], prefer: bool, exclude: list[str]
) -> None:
    result = collapse(given_recipients, prefer_shared_inbox=prefer, exclude_hosts=exclude)
    excluded = {name.lower() for name in exclude}
    every_address = {address for r in given_recipients for address in own(r) if address}

    assert len(result) == len(set(result)), "no duplicates"
    assert set(result) <= every_address, "every target is an inbox or shared inbox given"
    assert not [url for url in result if host(url) in excluded], "no target on an excluded host"
    for recipient in given_recipients:
        inbox, shared = own(recipient)
        if (host(inbox) if inbox else host(shared or "")) in excluded:
            assert inbox not in result
            continue
        assert inbox in result or shared in result, "every kept recipient is covered"
        if prefer and shared and host(shared) not in excluded:
            assert shared in result
        if not prefer and inbox:
            assert inbox in result


@settings(max_examples=300, deadline=None)
@given(
    given_recipients=st.lists(recipients, max_size=40),
    prefer=st.booleans(),
    exclude=st.lists(st.sampled_from(EXCLUDABLE), max_size=3),
)
def test_collapse_matches_a_plain_reading_of_its_rule(
    given_recipients: list[str | Recipient | Actor], prefer: bool, exclude: list[str]
) -> None:
    """The same as parsing every URL whole, in order: the shortcuts change nothing."""
    excluded = {name.lower() for name in exclude}
    expected: list[str] = []
    for recipient in given_recipients:
        inbox, shared = own(recipient)
        if inbox and host(inbox) in excluded:
            continue
        if shared and host(shared) in excluded:
            shared = None
        if not inbox and not shared:
            continue
        target = shared if shared and (prefer or not inbox) else inbox
        if target not in expected:
            expected.append(target)
    assert collapse(given_recipients, prefer_shared_inbox=prefer, exclude_hosts=exclude) == (
        expected
    )


@settings(max_examples=500, deadline=None)
@given(
    url=st.one_of(
        st.builds("https://{}".format, st.text(max_size=30)),
        st.builds("http://{}".format, st.text(max_size=30)),
        st.text(max_size=30),
    ),
    name=st.sampled_from(["local.example", "k.example", "a", "::1", "\u00fc.x"]),
)
def test_exclusion_agrees_with_urlsplit_on_any_text(url: str, name: str) -> None:
    assume(url)
    try:
        expected = host(url) == name
    except ValueError:
        return  # collapse does not read a host it need not; send refuses the URL later
    kept = collapse([url], exclude_hosts=[name])
    assert kept == ([] if expected else [url])


@settings(max_examples=500, deadline=None)
@given(
    texts=st.lists(
        st.one_of(
            st.builds("https://{}/i".format, st.text(max_size=20)),
            st.builds("https://{}".format, st.sampled_from([*HOSTS, "l\tocal.example", "x.y"])),
            st.text(min_size=1, max_size=20),
        ),
        min_size=1,
        max_size=6,
    ),
    names=st.lists(st.sampled_from(EXCLUDABLE), max_size=2),
)
def test_a_list_of_plain_urls_is_screened_as_each_url_is(
    texts: list[str], names: list[str]
) -> None:
    """Plain URLs are screened all at once (joined): the same as testing each one."""
    excluded = {name.lower() for name in names}
    try:
        expected = list(dict.fromkeys(t for t in texts if host(t) not in excluded))
    except ValueError:
        return  # collapse does not read a host it need not; send refuses the URL later
    assert collapse(texts, exclude_hosts=names) == expected
    assert collapse(tuple(texts), exclude_hosts=names) == expected

"""Hosts that used to be written by ``send()`` although no worker would ever reach them.

* A host in enclosed alphanumerics, ``ⓛⓞⓒⓐⓛⓗⓞⓢⓣ``: UTS 46 maps it to ``localhost``, IDNA
  2008 refuses its characters.  Refused as not an inbox URL.
* ``https://127.0.0.1/inbox`` and every host that means, without a DNS look-up, an
  address the workers refuse (IP literals and ``localhost`` names outside
  ``OUTBOX_ALLOWED_NETWORKS``): refused at ``send()`` with ``BlockedInbox`` by the rule the
  transport applies when it connects, for inboxes, gateways and webhook endpoints.
* A 3,000-character actor id that the key resolver knows: ``SenderTooLong``, not
  ``UnknownSender``.

The test project allows 127.0.0.0/8 and ::1; the default settings allow nothing, and
both are tried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_outbox import PortableInbox, outbox
from django_outbox.exceptions import (
    BlockedEndpoint,
    BlockedInbox,
    InvalidInbox,
    InvalidSend,
    SenderTooLong,
)
from django_outbox.transport import BlockedAddress, Transport
from testproject.demo.keys import ACTOR
from testproject.demo.webhooks import SHOP
from tests.support.sender_keys import good_key, resolver_returning
from tests.support.sends import ACTIVITY, rows_written

pytestmark = pytest.mark.django_db

ENCLOSED_LOCALHOST = "\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3"  # ⓛⓞⓒⓐⓛⓗⓞⓢⓣ
DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
PUBLIC = "https://ok.example/inbox"
#: Hosts every worker refuses without DNS under the default settings; the second
#: column says whether the test project's allowlist (127.0.0.0/8, ::1) lets it through.
REFUSED_BY_DEFAULT = [
    ("https://127.0.0.1/inbox", True),
    ("http://127.9.9.9:8080/inbox", True),
    ("https://localhost/inbox", True),
    ("https://api.localhost:8443/inbox", True),
    ("https://[::1]/inbox", True),
    ("https://[::ffff:127.0.0.1]/inbox", True),
    ("https://10.0.0.5/inbox", False),
    ("https://169.254.169.254/latest/meta-data", False),
    ("https://192.168.1.1/inbox", False),
    ("https://0.0.0.0/inbox", False),
    ("https://[fe80::1]/inbox", False),
    ("https://[fd00::1]/inbox", False),
    ("https://[::ffff:10.0.0.1]/inbox", False),
    ("https://[64:ff9b::a00:1]/inbox", False),
]
#: Hosts the rule leaves to DNS and the worker: names, and public IP literals.
TRIED = [
    PUBLIC,
    "https://1password.example/inbox",  # a name starting with a digit
    "https://localhost.example/inbox",
    "https://notlocalhost/inbox",
    "https://93.184.215.14/inbox",
    "https://[2606:4700::1111]/inbox",
    "https://ok.example/a://127.0.0.1/",  # the address is in the path, not the host
]


@pytest.fixture
def default_settings() -> Iterator[None]:
    """The settings a new project has: no network allowed."""
    with override_settings(OUTBOX_ALLOWED_NETWORKS=()):
        yield


def worker_refuses(url: str, allowed: tuple[str, ...]) -> bool:
    """Whether a worker's transport refuses to connect to ``url`` (without trying DNS for
    names: a name is not judged, as at send time)."""

    def no_dns(host: str, port: int) -> list[str]:
        raise OSError("no DNS in this test")

    transport = Transport(user_agent="test", allowed_networks=allowed, resolver=no_dns)
    try:
        asyncio.run(transport.post(url, {}, b"{}"))
    except BlockedAddress:
        return True
    except Exception:
        return False
    return False


def test_enclosed_alphanumerics_for_localhost_are_refused() -> None:
    inbox = f"https://{ENCLOSED_LOCALHOST}/inbox"
    with pytest.raises(InvalidInbox, match="IDNA 2008 refuses") as raised:
        outbox.send(ACTOR, ACTIVITY, [PUBLIC, inbox])
    assert "'localhost'" in str(raised.value)
    assert not isinstance(raised.value, BlockedInbox)  # not an address: not a host at all
    assert rows_written() == 0


def test_enclosed_alphanumerics_are_refused_as_an_endpoint_and_a_gateway_too() -> None:
    with pytest.raises(InvalidInbox, match="IDNA 2008 refuses"):
        outbox.send_webhook(SHOP, {"type": "x"}, [f"https://{ENCLOSED_LOCALHOST}/hook"])
    portable = PortableInbox(f"ap://{DID}/inbox", [f"https://{ENCLOSED_LOCALHOST}"])
    with pytest.raises(InvalidInbox, match="IDNA 2008 refuses"):
        outbox.send_portable(ACTOR, ACTIVITY, [portable])
    assert rows_written() == 0


def test_an_actor_id_of_3000_characters_is_too_long_not_unknown() -> None:
    actor = "https://demo.example/users/" + "a" * (3000 - 27)
    assert len(actor) == 3000
    with (
        override_settings(OUTBOX_KEY_RESOLVER=resolver_returning(good_key())),
        pytest.raises(SenderTooLong, match="3000 characters long; at most 2048 fit"),
    ):
        outbox.send(actor, ACTIVITY, [PUBLIC])
    assert rows_written() == 0
    with pytest.raises(SenderTooLong):
        outbox.send_webhook("s" * 3000, {"type": "x"}, ["https://hooks.example/x"])
    assert rows_written() == 0


@pytest.mark.parametrize(("inbox", "_"), REFUSED_BY_DEFAULT)
def test_default_settings_refuse_what_every_worker_refuses(
    default_settings: None, inbox: str, _: bool
) -> None:
    assert worker_refuses(inbox, ())
    with pytest.raises(BlockedInbox, match="is not a public address") as raised:
        outbox.send(ACTOR, ACTIVITY, [PUBLIC, inbox, "https://other.example/inbox"])
    assert type(raised.value) is BlockedInbox
    assert isinstance(raised.value, InvalidSend)
    assert "OUTBOX_ALLOWED_NETWORKS" in str(raised.value)
    assert rows_written() == 0


@pytest.mark.parametrize(("inbox", "allowed_here"), REFUSED_BY_DEFAULT)
def test_the_allowlist_is_the_workers_one(inbox: str, allowed_here: bool) -> None:
    """The test project allows loopback: what its workers would try, send() writes."""
    assert worker_refuses(inbox, ("127.0.0.0/8", "::1/128")) is not allowed_here
    if allowed_here:
        assert outbox.send(ACTOR, ACTIVITY, [inbox]) is not None
        assert rows_written() > 0
    else:
        with pytest.raises(BlockedInbox):
            outbox.send(ACTOR, ACTIVITY, [inbox])
        assert rows_written() == 0


@pytest.mark.parametrize("inbox", TRIED)
def test_names_and_public_addresses_are_left_to_the_worker(
    default_settings: None, inbox: str
) -> None:
    assert outbox.send(ACTOR, ACTIVITY, [inbox]) is not None


def test_a_blocked_host_among_many_is_named(default_settings: None) -> None:
    inboxes = [f"https://h{n}.example/inbox" for n in range(5000)]
    inboxes.insert(2500, "https://127.0.0.1:8443/inbox/x")
    with pytest.raises(BlockedInbox) as raised:
        outbox.send(ACTOR, ACTIVITY, inboxes)
    assert "'https://127.0.0.1:8443/inbox/x' names 127.0.0.1" in str(raised.value)
    assert "Loopback (127.0.0.0/8, RFC 1122)" in str(raised.value)
    assert rows_written() == 0


def test_a_gateway_naming_a_refused_address_is_refused(default_settings: None) -> None:
    portable = PortableInbox(f"ap://{DID}/inbox", ["https://gw.example", "http://127.0.0.1:8080"])
    with pytest.raises(BlockedInbox, match=r"gateway 'http://127\.0\.0\.1:8080/"):
        outbox.send_portable(ACTOR, ACTIVITY, [portable])
    assert rows_written() == 0
    fine = PortableInbox(f"ap://{DID}/inbox", ["https://gw.example", "https://gw2.example"])
    assert outbox.send_portable(ACTOR, ACTIVITY, [fine]) is not None


def test_webhook_endpoints_keep_their_own_error(default_settings: None) -> None:
    with pytest.raises(BlockedEndpoint, match="endpoint 'https://localhost/hook'"):
        outbox.send_webhook(SHOP, {"type": "x"}, ["https://localhost/hook"])
    assert issubclass(BlockedEndpoint, BlockedInbox)
    assert rows_written() == 0

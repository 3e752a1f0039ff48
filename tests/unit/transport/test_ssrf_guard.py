"""The SSRF guard answers from the package's IANA table, on every Python.

Python 3.11's ``ipaddress`` takes 192.0.0.192 (a cloud metadata address), 192.88.99.1,
fec0::1 and 3fff::1 for global addresses, and a guard built on ``is_global`` let a
worker connect to them.  The guard now asks ``special_addresses`` alone.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys

import pytest

from django_outbox.transport import BlockedAddress, Transport
from django_outbox.transport.addresses import is_blocked, parse_networks, resolve_checked
from tests.support.special_address_registry import REGISTRY

# Each of these is global to Python 3.11's ipaddress and none is a public unicast host.
GLOBAL_TO_PYTHON_311 = [
    ("192.0.0.192", "IETF Protocol Assignments (192.0.0.0/24, RFC 6890)"),
    ("192.88.99.1", "Deprecated (6to4 Relay Anycast) (192.88.99.0/24, RFC 7526)"),
    ("fec0::1", "Site-Local (deprecated) (fec0::/10, RFC 3879)"),
    ("3fff::1", "Documentation (3fff::/20, RFC 9637)"),
    ("5f00::1", "Segment Routing (SRv6) SIDs (5f00::/16, RFC 9602)"),
    ("::ffff:192.0.0.192", "IPv4-mapped 192.0.0.192: IETF Protocol Assignments"),
    ("64:ff9b::c000:c0", "NAT64 192.0.0.192: IETF Protocol Assignments"),
    ("64:ff9b:1::a00:1", "IPv4-IPv6 Translat. (local-use) (64:ff9b:1::/48, RFC 8215)"),
    ("2002:c000:c0::1", "6to4 192.0.0.192: IETF Protocol Assignments"),
]


def resolving_to(address: str) -> object:
    """A resolver that maps every name to ``address``."""
    return lambda host, port: [address]


@pytest.mark.skipif(
    not (3, 11, 7) <= sys.version_info < (3, 12),
    reason="later Pythons fixed some; earlier 3.11 releases (3.11.2) had an older table",
)
@pytest.mark.parametrize("address", [address for address, _ in GLOBAL_TO_PYTHON_311])
def test_python_311_takes_these_for_global_addresses(address: str) -> None:
    assert ipaddress.ip_address(address).is_global  # what the old guard relied on


@pytest.mark.parametrize(("address", "why"), GLOBAL_TO_PYTHON_311)
def test_addresses_python_calls_global_are_refused_with_the_registry_entry(
    address: str, why: str
) -> None:
    assert is_blocked(ipaddress.ip_address(address))
    with pytest.raises(BlockedAddress, match="not a public address") as raised:
        resolve_checked("inbox.example", 443, (), resolver=resolving_to(address))  # type: ignore[arg-type]
    assert why in str(raised.value)
    assert "inbox.example" in str(raised.value)


@pytest.mark.parametrize(("block", "reachable"), REGISTRY)
def test_the_guard_follows_the_table_at_both_ends_of_every_block(
    block: str, reachable: bool
) -> None:
    net = ipaddress.ip_network(block)
    for ip in (net.network_address, net.broadcast_address):
        assert is_blocked(ip) is not reachable, ip


def test_transport_refuses_a_name_resolving_to_the_metadata_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def no_connection(*args: object, **kwargs: object) -> None:
        # Were the guard to let it through, the test must still not leave loopback.
        raise AssertionError(f"the transport tried to connect to {args[2:4]}")

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", no_connection)
    transport = Transport(user_agent="test", resolver=resolving_to("192.0.0.192"))  # type: ignore[arg-type]
    with pytest.raises(BlockedAddress, match=r"192\.0\.0\.192"):
        asyncio.run(transport.post("https://metadata.example/inbox", {}, b"{}"))


def test_allowed_networks_cover_embedded_addresses_only_when_all_are_allowed() -> None:
    loopback = parse_networks(["127.0.0.0/8"])
    assert not is_blocked(ipaddress.ip_address("::ffff:127.0.0.1"), loopback)
    assert not is_blocked(ipaddress.ip_address("64:ff9b::7f00:1"), loopback)
    assert is_blocked(ipaddress.ip_address("64:ff9b::a00:1"), loopback)
    # Teredo: server 127.0.0.1 allowed, client 10.0.0.1 (inverted in the last 32 bits) not.
    teredo = ipaddress.IPv6Address(
        (0x20010000 << 96) | (0x7F000001 << 64) | (~0x0A000001 & 0xFFFFFFFF)
    )
    assert is_blocked(teredo, loopback)
    assert not is_blocked(teredo, parse_networks(["127.0.0.0/8", "10.0.0.0/8"]))


def test_public_addresses_pass() -> None:
    for address in ("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "192.0.0.9"):
        assert resolve_checked("inbox.example", 443, (), resolver=resolving_to(address)) == [  # type: ignore[arg-type]
            address
        ]

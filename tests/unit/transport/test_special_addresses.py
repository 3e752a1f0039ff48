"""The SSRF guard's own table of special-purpose addresses.

The registry rows (``tests/support/special_address_registry.py``) are transcribed
again, independently of the module's table, from IANA's IPv4 and IPv6 Special-Purpose
Address Registries (2025-10-09), so that a slip in one shows up against the other.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_outbox.transport.special_addresses import (
    REGISTRY_DATE,
    embedded_ipv4,
    is_special,
    why_special,
)
from tests.support.special_address_registry import REGISTRY

# 64:ff9b::/96 is globally reachable, but its first and last addresses carry 0.0.0.0 and
# 255.255.255.255: test_nat64_and_mapped_judged_by_their_ipv4 covers it.

PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "9.9.9.9",
    "208.67.222.222",
    "2606:4700::1111",
    "2a00:1450:4001:82b::200e",
    "2001:4860:4860::8888",
    "2620:fe::fe",
    # Just outside special blocks.
    "9.255.255.255",
    "11.0.0.0",
    "100.63.255.255",
    "100.128.0.0",
    "126.255.255.255",
    "128.0.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.0.1.0",
    "192.88.98.255",
    "192.88.100.0",
    "192.167.255.255",
    "192.169.0.0",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "2001:200::1",
    "2003::1",
    "3fff:1000::1",
    "2620:4f:7fff:ffff:ffff:ffff:ffff:ffff",
    "64:ff9b::808:808",
    "::ffff:8.8.8.8",
]

TARGETS = ["127.0.0.1", "10.0.0.1", "169.254.169.254", "192.0.0.192"]
PUBLIC_V4 = int(ipaddress.IPv4Address("8.8.8.8"))


def v6(value: int) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(value)


def embeddings(v4: str) -> dict[str, ipaddress.IPv6Address]:
    """Every IPv6 form that carries ``v4`` (Teredo both as server and as client)."""
    n = int(ipaddress.IPv4Address(v4))
    return {
        "mapped": v6(0xFFFF << 32 | n),
        "compatible": v6(n),
        "nat64": v6(0x0064FF9B << 96 | n),
        "nat64-local": v6(0x0064FF9B0001 << 80 | n),
        "6to4": v6(0x2002 << 112 | n << 80 | 1),
        "teredo-server": v6(0x20010000 << 96 | n << 64 | 0x8000_0000_0000),
        "teredo-client": v6(0x20010000 << 96 | PUBLIC_V4 << 64 | (~n & 0xFFFFFFFF)),
    }


def test_registry_date() -> None:
    assert REGISTRY_DATE == "2025-10-09"


@pytest.mark.parametrize(("block", "reachable"), REGISTRY)
def test_first_and_last_address_of_every_block(block: str, reachable: bool) -> None:
    net = ipaddress.ip_network(block)
    for address in (net[0], net[-1]):
        assert is_special(address) is not reachable, address
        assert (why_special(address) is None) is reachable, address


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_allowed(address: str) -> None:
    assert not is_special(address)
    assert not is_special(ipaddress.ip_address(address))
    assert why_special(address) is None


@pytest.mark.parametrize("v4", TARGETS)
def test_every_embedding_of_a_special_ipv4_refused(v4: str) -> None:
    assert is_special(v4)
    for form, address in embeddings(v4).items():
        assert is_special(address), (form, address)
        assert v4 in str(why_special(address)), (form, address)
        assert ipaddress.IPv4Address(v4) in [inner for _, inner in embedded_ipv4(address)]


def test_embedding_of_a_public_ipv4_judged_by_the_block() -> None:
    forms = embeddings("8.8.8.8")
    assert not is_special(forms["mapped"])
    assert not is_special(forms["nat64"])
    # Deprecated or local forms are refused whatever they carry.
    for form in ("compatible", "nat64-local", "6to4", "teredo-server", "teredo-client"):
        assert is_special(forms[form]), form
        assert "8.8.8.8" not in str(why_special(forms[form]))


def test_teredo_decoding_matches_rfc_4380_example() -> None:
    # RFC 4380 section 4: server 65.54.227.120, client 192.0.2.45 behind port 40000.
    address = ipaddress.IPv6Address("2001:0:4136:e378:8000:63bf:3fff:fdd2")
    assert embedded_ipv4(address) == (
        ("Teredo server", ipaddress.IPv4Address("65.54.227.120")),
        ("Teredo client", ipaddress.IPv4Address("192.0.2.45")),
    )


def test_why_special_names_the_registry_entry() -> None:
    assert why_special("127.0.0.1") == "Loopback (127.0.0.0/8, RFC 1122)"
    assert why_special("192.0.0.192") == "IETF Protocol Assignments (192.0.0.0/24, RFC 6890)"
    assert why_special("fec0::1") == "Site-Local (deprecated) (fec0::/10, RFC 3879)"
    assert why_special("::ffff:169.254.169.254") == (
        "IPv4-mapped 169.254.169.254: Link Local (169.254.0.0/16, RFC 3927)"
    )
    assert why_special("::1") == "Loopback Address (::1/128, RFC 4291)"
    assert str(why_special("64:ff9b:1::808:808")).startswith("IPv4-IPv6 Translat. (local-use)")
    assert str(why_special("::808:808")).startswith("IPv4-compatible Address (deprecated)")
    assert str(why_special("2002:808:808::1")).startswith("6to4 (2002::/16, RFC 3056)")
    assert str(why_special("4000::1")) == "Reserved by IETF (4000::/3, RFC 4291)"


@given(st.integers(0, 2**32 - 1))
def test_nat64_and_mapped_judged_by_their_ipv4(n: int) -> None:
    plain = is_special(ipaddress.IPv4Address(n))
    assert plain == is_special(v6(0xFFFF << 32 | n)) == is_special(v6(0x0064FF9B << 96 | n))


@given(st.integers(0, 2**128 - 1) | st.integers(0, 2**32 - 1).map(lambda n: 0xFFFF << 32 | n))
def test_why_special_agrees_with_is_special_ipv6(n: int) -> None:
    assert is_special(v6(n)) == (why_special(v6(n)) is not None)


@given(st.integers(0, 2**32 - 1))
def test_why_special_agrees_with_is_special_ipv4(n: int) -> None:
    address = ipaddress.IPv4Address(n)
    assert is_special(address) == (why_special(address) is not None)


# Python 3.11.7 answers is_global=True for all four.
@pytest.mark.parametrize("address", ["192.0.0.192", "192.88.99.1", "fec0::1", "3fff::1"])
def test_refused_where_ipaddress_says_global(address: str) -> None:
    assert is_special(address)


_PROPERTIES = (
    "is_global",
    "is_private",
    "is_reserved",
    "is_loopback",
    "is_link_local",
    "is_multicast",
    "is_unspecified",
    "is_site_local",
)
SAMPLE = [
    *PUBLIC,
    *TARGETS,
    "192.88.99.1",
    "fec0::1",
    "3fff::1",
    "::ffff:127.0.0.1",
    "64:ff9b::a9fe:a9fe",
]


@pytest.mark.parametrize("value", [True, False])
def test_answers_ignore_ipaddress_properties(monkeypatch: pytest.MonkeyPatch, value: bool) -> None:
    before = {address: is_special(address) for address in SAMPLE}
    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for name in _PROPERTIES:
            if hasattr(cls, name):
                monkeypatch.setattr(cls, name, property(lambda self: value))
    assert ipaddress.ip_address("8.8.8.8").is_private is value
    assert {address: is_special(address) for address in SAMPLE} == before


def test_a_string_that_is_no_address_raises_value_error() -> None:
    with pytest.raises(ValueError, match="does not appear to be"):
        is_special("example.com")

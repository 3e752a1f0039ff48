"""The SSRF guard: which addresses deliveries may connect to."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from django_outbox.transport.addresses import (
    BlockedAddress,
    ResolveError,
    address_without_dns,
    is_blocked,
    parse_networks,
    refusal_without_dns,
    resolve_checked,
)

LOOPBACK = parse_networks(["127.0.0.0/8", "::1/128"])


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.5.6.7",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "fe80::1",
        "fc00::1",
        "224.0.0.1",
        "ff02::1",
        "ff0e::1",
        "0.0.0.0",
        "::",
        "240.0.0.1",
        "255.255.255.255",
        "100.64.0.1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "2002:7f00:1::",
    ],
)
def test_special_addresses_are_refused(address: str) -> None:
    with pytest.raises(BlockedAddress, match="blocked address"):
        resolve_checked(address, 443, ())


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_public_literals_pass_without_dns(address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_dns(*args: object, **kwargs: object) -> None:
        raise AssertionError("literal IPs must not be resolved")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    assert resolve_checked(address, 443, ()) == [address]
    assert resolve_checked(f"[{address}]" if ":" in address else address, 443, ()) == [address]


def test_allowed_network_lets_an_address_through() -> None:
    assert resolve_checked("127.0.0.9", 80, LOOPBACK) == ["127.0.0.9"]
    assert resolve_checked("::1", 80, LOOPBACK) == ["::1"]
    with pytest.raises(BlockedAddress):
        resolve_checked("10.0.0.1", 80, LOOPBACK)


def test_ipv4_mapped_address_is_judged_by_its_ipv4_part() -> None:
    mapped = ipaddress.ip_address("::ffff:127.0.0.1")
    assert is_blocked(mapped)
    assert not is_blocked(mapped, parse_networks(["127.0.0.0/8"]))
    assert is_blocked(ipaddress.ip_address("::ffff:10.0.0.1"), parse_networks(["127.0.0.0/8"]))
    assert not is_blocked(ipaddress.ip_address("::ffff:8.8.8.8"))


def test_localhost_names_are_loopback_without_dns_and_refused_unless_allowed() -> None:
    def no_dns(host: str, port: int) -> list[str]:
        raise AssertionError("localhost names are not looked up (RFC 6761)")

    for name in ("localhost", "api.localhost"):
        with pytest.raises(BlockedAddress, match=rf"{name} \(127\.0\.0\.1\).*Loopback"):
            resolve_checked(name, 80, (), resolver=no_dns)
        assert resolve_checked(name, 80, LOOPBACK, resolver=no_dns) == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("localhost", "127.0.0.1"),
        ("a.b.localhost", "127.0.0.1"),
        ("10.1.2.3", "10.1.2.3"),
        ("[::1]", "::1"),
        ("fe80::1%eth0", "fe80::1%eth0"),
        ("localhost.example", None),
        ("1password.example", None),
        ("example.com", None),
        ("", None),
    ],
)
def test_what_a_host_means_without_dns(host: str, address: str | None) -> None:
    found = address_without_dns(host)
    assert (None if found is None else str(found)) == address


def test_the_refusal_without_dns_is_the_transports_rule() -> None:
    assert refusal_without_dns("example.com") is None  # left to DNS and the connect check
    assert refusal_without_dns("8.8.8.8") is None
    assert refusal_without_dns("localhost") == "Loopback (127.0.0.0/8, RFC 1122)"
    assert refusal_without_dns("localhost", LOOPBACK) is None
    assert refusal_without_dns("169.254.169.254") == "Link Local (169.254.0.0/16, RFC 3927)"
    assert refusal_without_dns("::ffff:10.0.0.1", LOOPBACK) is not None
    for host in ("localhost", "169.254.169.254", "::ffff:10.0.0.1", "8.8.8.8"):
        refused = refusal_without_dns(host, LOOPBACK) is not None
        try:
            resolve_checked(host, 443, LOOPBACK)
        except BlockedAddress:
            assert refused
        else:
            assert not refused


def test_one_private_answer_among_public_ones_refuses_the_host() -> None:
    def resolver(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "10.0.0.7"]

    with pytest.raises(BlockedAddress, match=r"10\.0\.0\.7"):
        resolve_checked("mixed.example", 443, (), resolver=resolver)


def test_resolver_answers_are_checked_and_deduplicated_in_order() -> None:
    def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.3", "127.0.0.2", "127.0.0.3"]

    assert resolve_checked("inbox.test", 80, LOOPBACK, resolver=resolver) == [
        "127.0.0.3",
        "127.0.0.2",
    ]
    with pytest.raises(BlockedAddress):
        resolve_checked("inbox.test", 80, (), resolver=resolver)


def test_resolution_failures_raise_resolve_error() -> None:
    def failing(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(ResolveError, match=r"cannot resolve nowhere\.invalid"):
        resolve_checked("nowhere.invalid", 443, (), resolver=failing)
    with pytest.raises(ResolveError, match="no addresses"):
        resolve_checked("empty.test", 443, (), resolver=lambda host, port: [])


def test_parse_networks() -> None:
    nets = parse_networks(["10.0.0.0/8", " 127.0.0.1/8 ", "::1", "192.168.1.7"])
    assert [str(n) for n in nets] == ["10.0.0.0/8", "127.0.0.0/8", "::1/128", "192.168.1.7/32"]
    with pytest.raises(ValueError, match="not an IP network"):
        parse_networks(["10.0.0.0/33"])
    with pytest.raises(ValueError, match=r"example\.com"):
        parse_networks(["example.com"])

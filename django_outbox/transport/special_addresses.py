"""Which IP addresses are not plain public unicast: the package's own table.

Deliveries go to hosts named by strangers, so the SSRF guard must not lean on
:mod:`ipaddress`'s ``is_global``/``is_private``, whose answers change between Python
releases (3.11 takes ``192.0.0.192``, ``192.88.99.1``, ``fec0::1`` and ``3fff::1`` for
public addresses).  The table below is IANA's IPv4 and IPv6 Special-Purpose Address
Registries, plus multicast and the IPv6 space IANA keeps outside global unicast.

The rule: an address is deliverable only if the most specific block holding it is
none of these, or is a block the registry marks "Globally Reachable: True".  An IPv6
address that carries an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo) must
also carry a deliverable IPv4 address, since that is where a gateway sends the
packets.  Decisions beyond the registry's own columns:

* ``::ffff:0:0/96`` (IPv4-mapped) is judged by its IPv4 address alone: a dual-stack
  socket connecting to it connects to that IPv4 address.
* ``64:ff9b::/96`` (NAT64, globally reachable) is judged by its IPv4 address.
* ``2002::/16`` (6to4) and ``2001::/32`` (Teredo) are refused whole: the registry gives
  them no reachability (N/A), both are deprecated or dead (RFC 7526; the public Teredo
  servers closed), and a relay on the worker's network would forward to the IPv4 inside.
  ``::/96`` (IPv4-compatible, deprecated by RFC 4291) and the local-use NAT64 prefix are
  refused whole too.  Their IPv4 addresses are still decoded, for :func:`why_special`.
* ``192.88.99.0/24`` (the terminated 6to4 relay anycast entry, all columns empty) is
  refused, as Mastodon does.

Lookups bisect a sorted list of integer interval starts, built once at import.
"""

from __future__ import annotations

import ipaddress
from bisect import bisect_right
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: "Last Updated" of both IANA special-purpose registries transcribed below.
REGISTRY_DATE = "2025-10-09"

# (block, RFC, registry name).  IANA IPv4 Special-Purpose Address Registry, last
# updated 2025-10-09: the entries not globally reachable.
_IPV4_REGISTRY = (
    ("0.0.0.0/8", "RFC 791", '"This network"'),
    ("0.0.0.0/32", "RFC 1122", '"This host on this network"'),
    ("10.0.0.0/8", "RFC 1918", "Private-Use"),
    ("100.64.0.0/10", "RFC 6598", "Shared Address Space"),
    ("127.0.0.0/8", "RFC 1122", "Loopback"),
    ("169.254.0.0/16", "RFC 3927", "Link Local"),
    ("172.16.0.0/12", "RFC 1918", "Private-Use"),
    ("192.0.0.0/24", "RFC 6890", "IETF Protocol Assignments"),
    ("192.0.0.0/29", "RFC 7335", "IPv4 Service Continuity Prefix"),
    ("192.0.0.8/32", "RFC 7600", "IPv4 dummy address"),
    ("192.0.0.170/32", "RFC 8880", "NAT64/DNS64 Discovery"),
    ("192.0.0.171/32", "RFC 8880", "NAT64/DNS64 Discovery"),
    ("192.0.2.0/24", "RFC 5737", "Documentation (TEST-NET-1)"),
    ("192.88.99.0/24", "RFC 7526", "Deprecated (6to4 Relay Anycast)"),
    ("192.88.99.2/32", "RFC 6751", "6a44-relay anycast address"),
    ("192.168.0.0/16", "RFC 1918", "Private-Use"),
    ("198.18.0.0/15", "RFC 2544", "Benchmarking"),
    ("198.51.100.0/24", "RFC 5737", "Documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "RFC 5737", "Documentation (TEST-NET-3)"),
    ("240.0.0.0/4", "RFC 1112", "Reserved"),
    ("255.255.255.255/32", "RFC 919", "Limited Broadcast"),
)
# Not in that registry, and no unicast destination either.
_IPV4_EXTRA = (("224.0.0.0/4", "RFC 5771", "Multicast"),)
# The registry's "Globally Reachable: True" entries: public servers may answer there,
# so they are allowed even inside a refused block (192.0.0.9 and .10 in 192.0.0.0/24).
_IPV4_GLOBAL = (
    ("192.0.0.9/32", "RFC 7723", "Port Control Protocol Anycast"),
    ("192.0.0.10/32", "RFC 8155", "Traversal Using Relays around NAT Anycast"),
    ("192.31.196.0/24", "RFC 7535", "AS112-v4"),
    ("192.52.193.0/24", "RFC 7450", "AMT"),
    ("192.175.48.0/24", "RFC 7534", "Direct Delegation AS112 Service"),
)

# IANA IPv6 Special-Purpose Address Registry, last updated 2025-10-09: the entries not
# globally reachable.  ::ffff:0:0/96 (IPv4-mapped) is left out on purpose: see above.
_IPV6_REGISTRY = (
    ("::1/128", "RFC 4291", "Loopback Address"),
    ("::/128", "RFC 4291", "Unspecified Address"),
    ("64:ff9b:1::/48", "RFC 8215", "IPv4-IPv6 Translat. (local-use)"),
    ("100::/64", "RFC 6666", "Discard-Only Address Block"),
    ("100:0:0:1::/64", "RFC 9780", "Dummy IPv6 Prefix"),
    ("2001::/23", "RFC 2928", "IETF Protocol Assignments"),
    ("2001::/32", "RFC 4380", "TEREDO"),
    ("2001:2::/48", "RFC 5180", "Benchmarking"),
    ("2001:10::/28", "RFC 4843", "Deprecated (previously ORCHID)"),
    ("2001:db8::/32", "RFC 3849", "Documentation"),
    ("2002::/16", "RFC 3056", "6to4"),
    ("3fff::/20", "RFC 9637", "Documentation"),
    ("5f00::/16", "RFC 9602", "Segment Routing (SRv6) SIDs"),
    ("fc00::/7", "RFC 4193", "Unique-Local"),
    ("fe80::/10", "RFC 4291", "Link-Local Unicast"),
)
# Beyond that registry: deprecated forms, multicast, and the blocks the IANA IPv6
# Address Space registry keeps "Reserved by IETF" (nothing outside 2000::/3 is
# allocated for global unicast, so no public server lives there).
_IPV6_EXTRA = (
    ("::/96", "RFC 4291", "IPv4-compatible Address (deprecated)"),
    ("fec0::/10", "RFC 3879", "Site-Local (deprecated)"),
    ("ff00::/8", "RFC 4291", "Multicast"),
    ("::/8", "RFC 4291", "Reserved by IETF"),
    ("100::/8", "RFC 4291", "Reserved by IETF"),
    ("200::/7", "RFC 4048", "Reserved by IETF"),
    ("400::/6", "RFC 4291", "Reserved by IETF"),
    ("800::/5", "RFC 4291", "Reserved by IETF"),
    ("1000::/4", "RFC 4291", "Reserved by IETF"),
    ("4000::/3", "RFC 4291", "Reserved by IETF"),
    ("6000::/3", "RFC 4291", "Reserved by IETF"),
    ("8000::/3", "RFC 4291", "Reserved by IETF"),
    ("a000::/3", "RFC 4291", "Reserved by IETF"),
    ("c000::/3", "RFC 4291", "Reserved by IETF"),
    ("e000::/4", "RFC 4291", "Reserved by IETF"),
    ("f000::/5", "RFC 4291", "Reserved by IETF"),
    ("f800::/6", "RFC 4291", "Reserved by IETF"),
    ("fe00::/9", "RFC 4291", "Reserved by IETF"),
)
_IPV6_GLOBAL = (
    ("64:ff9b::/96", "RFC 6052", "IPv4-IPv6 Translat."),  # and its IPv4 must be public
    ("2001:1::1/128", "RFC 7723", "Port Control Protocol Anycast"),
    ("2001:1::2/128", "RFC 8155", "Traversal Using Relays around NAT Anycast"),
    ("2001:1::3/128", "RFC 9665", "DNS-SD Service Registration Protocol Anycast"),
    ("2001:3::/32", "RFC 7450", "AMT"),
    ("2001:4:112::/48", "RFC 7535", "AS112-v6"),
    ("2001:20::/28", "RFC 7343", "ORCHIDv2"),
    ("2001:30::/28", "RFC 9374", "Drone Remote ID Protocol Entity Tags (DETs) Prefix"),
    ("2620:4f:8000::/48", "RFC 7534", "Direct Delegation AS112 Service"),
)

Table = tuple[list[int], list[str | None]]


def _table(
    special: Iterable[tuple[str, str, str]], allowed: Iterable[tuple[str, str, str]]
) -> Table:
    """Flatten nested blocks into sorted interval starts, each with its verdict.

    The verdict of an interval is that of the most specific block holding it: a
    description for a special block, None for a globally reachable one or for none.
    """
    blocks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str | None]] = [
        (ipaddress.ip_network(cidr), f"{name} ({cidr}, {rfc})") for cidr, rfc, name in special
    ]
    blocks += [(ipaddress.ip_network(cidr), None) for cidr, _, _ in allowed]
    top = 1 << blocks[0][0].max_prefixlen
    edges = {0}
    for net, _ in blocks:
        edges.add(int(net.network_address))
        edges.add(int(net.broadcast_address) + 1)
    starts: list[int] = []
    verdicts: list[str | None] = []
    for edge in sorted(edges - {top}):
        holding = [
            (net.prefixlen, verdict)
            for net, verdict in blocks
            if int(net.network_address) <= edge <= int(net.broadcast_address)
        ]
        verdict = max(holding, key=lambda pair: pair[0])[1] if holding else None
        if not verdicts or verdicts[-1] != verdict:
            starts.append(edge)
            verdicts.append(verdict)
    return starts, verdicts


_V4 = _table(_IPV4_REGISTRY + _IPV4_EXTRA, _IPV4_GLOBAL)
_V6 = _table(_IPV6_REGISTRY + _IPV6_EXTRA, _IPV6_GLOBAL)

_LOW32 = 0xFFFFFFFF
_MAPPED = 0xFFFF  # address >> 32 of ::ffff:0:0/96
_NAT64 = 0x0064FF9B << 64  # address >> 32 of 64:ff9b::/96
_NAT64_LOCAL = 0x0064FF9B0001  # address >> 80 of 64:ff9b:1::/48
_TEREDO = 0x20010000  # address >> 96 of 2001::/32
_SIXTOFOUR = 0x2002  # address >> 112 of 2002::/16


def _verdict(table: Table, value: int) -> str | None:
    starts, verdicts = table
    return verdicts[bisect_right(starts, value) - 1]


def embedded_ipv4(ip: IPAddress) -> tuple[tuple[str, ipaddress.IPv4Address], ...]:
    """The IPv4 addresses an IPv6 address carries, each with the form that carries it.

    IPv4-mapped, IPv4-compatible and NAT64 (well-known and local-use, the IPv4 address
    in the last 32 bits) carry one; 6to4 carries one in bits 16-48; Teredo carries
    its server (bits 32-64) and its client (the last 32 bits, inverted).  An IPv4
    address, or an IPv6 address of none of these forms, carries none.  The guard's
    allowlist check needs these as well as :func:`is_special` does.
    """
    if ip.version == 4:
        return ()
    value = int(ip)
    high = value >> 32
    if high == _MAPPED:
        return (("IPv4-mapped", ipaddress.IPv4Address(value & _LOW32)),)
    if high == _NAT64 or value >> 80 == _NAT64_LOCAL:
        return (("NAT64", ipaddress.IPv4Address(value & _LOW32)),)
    if high == 0 and value > 1:  # :: and ::1 are no IPv4-compatible addresses
        return (("IPv4-compatible", ipaddress.IPv4Address(value)),)
    if value >> 112 == _SIXTOFOUR:
        return (("6to4", ipaddress.IPv4Address((value >> 80) & _LOW32)),)
    if value >> 96 == _TEREDO:
        return (
            ("Teredo server", ipaddress.IPv4Address((value >> 64) & _LOW32)),
            ("Teredo client", ipaddress.IPv4Address(~value & _LOW32)),
        )
    return ()


def why_special(ip: IPAddress | str) -> str | None:
    """Why ``ip`` is not a plain public unicast address, for an error message; else None.

    The answer names the registry entry, block and RFC, e.g. ``"Loopback (127.0.0.0/8,
    RFC 1122)"``, and for an IPv6 address carrying an IPv4 one also which IPv4 address
    is special and why.  A string is parsed with :func:`ipaddress.ip_address` first
    (which raises :class:`ValueError` for a string that is no address).
    """
    if isinstance(ip, str):
        ip = ipaddress.ip_address(ip)
    if ip.version == 4:
        return _verdict(_V4, int(ip))
    value = int(ip)
    if value >> 32 == _MAPPED:
        reason = _verdict(_V4, value & _LOW32)
        return None if reason is None else f"IPv4-mapped {ip.ipv4_mapped}: {reason}"
    reasons = [_verdict(_V6, value)]
    for form, inner in embedded_ipv4(ip):
        reason = _verdict(_V4, int(inner))
        if reason is not None:
            reasons.append(f"{form} {inner}: {reason}")
    found = [reason for reason in reasons if reason is not None]
    return "; ".join(found) if found else None


def is_special(ip: IPAddress | str) -> bool:
    """True when ``ip`` is not plain public unicast, judging embedded IPv4 addresses too.

    The same answer on every Python version: only this module's table is consulted,
    never :mod:`ipaddress`'s properties.  Accepts what :func:`why_special` accepts.
    """
    if isinstance(ip, str):
        ip = ipaddress.ip_address(ip)
    if ip.version == 4:
        return _verdict(_V4, int(ip)) is not None
    value = int(ip)
    if value >> 32 == _MAPPED:
        return _verdict(_V4, value & _LOW32) is not None
    if _verdict(_V6, value) is not None:
        return True
    return any(_verdict(_V4, int(inner)) is not None for _, inner in embedded_ipv4(ip))

"""The SSRF guard: which IP addresses an outgoing delivery may connect to.

An inbox URL comes from a remote actor document, so its host may point anywhere,
including the worker's own network (``localhost``, ``10.0.0.5``, the cloud metadata
service at ``169.254.169.254``).  :func:`resolve_checked` resolves a host and refuses
it when *any* of its addresses is not a public unicast address, unless that address
lies in a network the operator allowed.  The transport then connects to exactly the
address that was checked, so a DNS answer that changes between check and connect
(DNS rebinding) cannot slip through.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence

from django_outbox.transport.errors import BlockedAddress, ResolveError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]

# IPv6 prefixes that carry an IPv4 address a gateway would forward to.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Parse CIDR strings (``"10.0.0.0/8"``, ``"::1"``) into networks for the allowlist.

    A bare address means that one address.  Host bits are tolerated
    (``"127.0.0.1/8"`` is ``127.0.0.0/8``) because the intent is unambiguous.
    Raises :class:`ValueError` naming the bad entry, so a setting check can report it.
    """
    networks: list[IPNetwork] = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"not an IP network: {value!r} ({exc})") from None
    return tuple(networks)


def _embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """Return the IPv4 address a NAT64 or 6to4 gateway would forward an IPv6 one to."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _is_special(ip: IPAddress) -> bool:
    """True for any address that is not plain public unicast."""
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


def is_blocked(ip: IPAddress, allowed_networks: Sequence[IPNetwork] = ()) -> bool:
    """Whether deliveries must not connect to ``ip``, given the operator's allowlist.

    An IPv4-mapped address (``::ffff:127.0.0.1``) is judged as the IPv4 address it is;
    a NAT64 or 6to4 address by its embedded IPv4 address as well, because that is
    where the packets end up.
    """
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    embedded = _embedded_ipv4(ip)
    candidates: tuple[IPAddress, ...] = (ip,) if embedded is None else (ip, embedded)
    for candidate in candidates:
        if any(candidate in net for net in allowed_networks if net.version == candidate.version):
            return False
    return any(_is_special(candidate) for candidate in candidates)


def _literal(host: str) -> IPAddress | None:
    """Parse ``host`` as an IP literal (brackets and IPv6 zone allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _getaddrinfo(host: str, port: int) -> list[str]:
    """Resolve ``host`` with the system resolver, TCP addresses in the resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def resolve_checked(
    host: str,
    port: int,
    allowed_networks: Sequence[IPNetwork] = (),
    *,
    resolver: Resolver | None = None,
) -> list[str]:
    """Resolve ``host`` and return the addresses to connect to, in order, if all are allowed.

    Every resolved address is checked, not just the first: a host that answers with one
    public and one private address is refused, since a later connection attempt (or a
    resolver with another order) would reach the private one.  IP literals skip DNS.
    ``resolver`` replaces :func:`socket.getaddrinfo` (tests map made-up names to
    loopback with it); its answers are checked all the same.

    Raises :class:`ResolveError` if nothing resolves, :class:`BlockedAddress` if an
    address is refused.
    """
    literal = _literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            raw = (resolver or _getaddrinfo)(host, port)
            addresses = [ipaddress.ip_address(value) for value in raw]
        except (OSError, UnicodeError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise ResolveError(f"cannot resolve {host}: {reason}") from exc
        if not addresses:
            raise ResolveError(f"cannot resolve {host}: no addresses")
    unique = list(dict.fromkeys(addresses))
    for ip in unique:
        if is_blocked(ip, allowed_networks):
            where = host if literal is not None else f"{host} ({ip})"
            raise BlockedAddress(f"blocked address: {where} is not a public address")
    return [str(ip) for ip in unique]

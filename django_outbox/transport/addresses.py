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

from django_outbox.transport.failures import BlockedAddress, ResolveError
from django_outbox.transport.special_addresses import embedded_ipv4, is_special, why_special

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]

_LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


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


def is_blocked(ip: IPAddress, allowed_networks: Sequence[IPNetwork] = ()) -> bool:
    """Whether deliveries must not connect to ``ip``, given the operator's allowlist.

    Special-purpose addresses are those of the package's own IANA table
    (:mod:`~django_outbox.transport.special_addresses`), the same on every Python.
    An address in an allowed network passes, and so does an IPv6 address whose
    embedded IPv4 addresses (IPv4-mapped, NAT64, 6to4, both of Teredo's) all are in
    one: that is where the packets end up.
    """
    embedded = [inner for _, inner in embedded_ipv4(ip)]
    if _allowed(ip, allowed_networks) or (
        embedded and all(_allowed(inner, allowed_networks) for inner in embedded)
    ):
        return False
    return is_special(ip)


def _allowed(ip: IPAddress, allowed_networks: Sequence[IPNetwork]) -> bool:
    return any(ip in net for net in allowed_networks if net.version == ip.version)


def address_without_dns(host: str) -> IPAddress | None:
    """The address ``host`` means without a DNS look-up, if it means one; else None.

    An IP literal (brackets and IPv6 zone allowed) is that address; ``localhost`` and
    every name under it are the loopback interface (RFC 6761), ``127.0.0.1``.  ``send()``
    judges these at once, through :func:`refusal_without_dns`, and the transport
    connects to them without asking DNS, so that both read a host alike.
    """
    if host == "localhost" or host.endswith(".localhost"):
        return _LOOPBACK
    if not host or not (host[0].isdigit() or ":" in host or host[0] == "["):
        return None  # no IP literal: spare the exception below
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def refusal(ip: IPAddress, allowed_networks: Sequence[IPNetwork] = ()) -> str | None:
    """Why deliveries must not connect to ``ip`` (:func:`is_blocked`), or None if they may."""
    if not is_blocked(ip, allowed_networks):
        return None
    return why_special(ip) or "outside the allowed networks"


def refusal_without_dns(host: str, allowed_networks: Sequence[IPNetwork] = ()) -> str | None:
    """Why deliveries must not go to ``host``, told without DNS (:func:`address_without_dns`
    judged by :func:`refusal`); None if it means no address or an allowed one."""
    address = address_without_dns(host)
    return None if address is None else refusal(address, allowed_networks)


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
    resolver with another order) would reach the private one.
    IP literals and ``localhost`` names skip DNS (:func:`address_without_dns`).
    ``resolver`` replaces :func:`socket.getaddrinfo` (tests map made-up names to
    loopback with it); its answers are checked all the same.

    Raises :class:`ResolveError` if nothing resolves, :class:`BlockedAddress` if an
    address is refused.
    """
    named = address_without_dns(host)
    if named is not None:
        addresses = [named]
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
        why = refusal(ip, allowed_networks)
        if why is not None:
            where = host if named is not None and str(ip) == host.strip("[]") else f"{host} ({ip})"
            raise BlockedAddress(f"blocked address: {where} is not a public address: {why}")
    return [str(ip) for ip in unique]

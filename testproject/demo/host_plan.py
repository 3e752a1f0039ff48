"""The demo's hosts: groups that behave alike (quick, failing first, refusing, silent,
asking for RFC 9421, charging per message), their servers, and the inboxes spread
over them."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.core.management.base import CommandError

from testproject.demo.paid import PRICE_MSAT
from testproject.inbox_servers import Behaviour, InboxServer, ServerFarm
from testproject.lightning.l402_inbox import L402Gate


@dataclass
class Group:
    """Hosts that behave alike, and what their deliveries should end as."""

    label: str
    expect: str
    hosts: int
    inboxes_per_host: int  # 0: share the inboxes the other groups leave
    behaviour: Any  # Behaviour, or a function of the host's index giving one
    servers: list[InboxServer] = field(default_factory=list)
    inboxes: list[str] = field(default_factory=list)

    def behaviour_for(self, index: int) -> Behaviour:
        return self.behaviour(index) if callable(self.behaviour) else self.behaviour


def groups(hosts: int, gate: L402Gate) -> list[Group]:
    """The demo's mix of hosts: all but nine are quick and healthy."""
    special = [
        Group("500, then 202", "delivered", 3, 8, Behaviour(statuses=(500, 202), delay=0.03)),
        Group(
            "429 Retry-After: 2, then 202",
            "delivered",
            1,
            8,
            Behaviour(statuses=(429, 202), headers={"Retry-After": "2"}, delay=0.03),
        ),
        Group(
            "202 to RFC 9421 only (401 else)",
            "delivered",
            1,
            40,
            Behaviour.accept_only("rfc9421", delay=0.03),
        ),
        Group("202 after 0.5 s", "delivered", 1, 20, Behaviour(delay=0.5)),
        Group("410 Gone", "refused", 1, 20, Behaviour(statuses=(410,), delay=0.03)),
        Group("silent (times out)", "failed", 1, 2, Behaviour(silent=True)),
        Group(
            f"402 L402, {PRICE_MSAT:,} msat a message",
            "delivered",
            1,
            10,
            Behaviour(delay=0.03, gate=gate),
        ),
    ]
    quick = hosts - sum(g.hosts for g in special)
    if quick < 1:
        raise CommandError(f"--hosts must be at least {hosts - quick + 1}")
    fast = Group(
        "202 after 20-50 ms",
        "delivered",
        quick,
        0,
        lambda i: Behaviour(delay=0.02 + 0.005 * (i % 7)),
    )
    return [fast, *special]


@contextmanager
def farm_for(plan: list[Group]) -> Iterator[ServerFarm]:
    farm = ServerFarm(sum(g.hosts for g in plan), record=False)
    servers = iter(farm.servers)
    for group in plan:
        group.servers = [next(servers) for _ in range(group.hosts)]
    with farm:
        yield farm


def spread_inboxes(plan: list[Group], total: int) -> list[str]:
    """Give each group its inboxes (``/users/N/inbox`` on each host) and return them all,
    shuffled as a real follower list would be."""
    fixed = sum(g.hosts * g.inboxes_per_host for g in plan)
    if total <= fixed:
        raise CommandError(f"--inboxes must be more than {fixed}")
    rest = [g for g in plan if not g.inboxes_per_host]
    share = total - fixed
    everything: list[str] = []
    host_index = 0
    for group in plan:
        for i, server in enumerate(group.servers):
            if group.inboxes_per_host:
                count = group.inboxes_per_host
            else:
                hosts = sum(g.hosts for g in rest)
                count = share // hosts + (1 if i < share % hosts else 0)
            behaviour = group.behaviour_for(host_index)
            host_index += 1
            for n in range(1, count + 1):
                path = f"/users/{n}/inbox"
                server.behave(path, behaviour)
                group.inboxes.append(server.url(path))
        everything.extend(group.inboxes)
    random.Random(42).shuffle(everything)
    return everything

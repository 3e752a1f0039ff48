"""Extensions: features that take part in delivery at the core's steps.

The core names no extension.  It asks :func:`~django_outbox.extensions.registry.active`
for those the settings turn on and calls each at the claim (:meth:`Extension.tickets`,
:meth:`Extension.park`), at the attempt (the :class:`Ticket` a claimed delivery
carries), when outcomes are recorded (:meth:`Extension.record`), in the sweep and the
recovery pass (their steps), as a worker starts and stops, and for the admin.  With
none turned on, the core runs no code of any.  Each hook's default does nothing, so
an extension writes only those it needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from django_outbox.transport import Response
from django_outbox.values.claimed import ClaimedRow, MessageData
from django_outbox.values.outcomes import AttemptReport, AttemptResult, Outcome

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite
    from django.contrib.admin.options import InlineModelAdmin
    from prometheus_client.core import Metric

#: Sends the attempt's request, with an ``Authorization`` header when given one.
Post = Callable[[str | None], Awaitable[Response]]


@dataclass(frozen=True)
class Exchange:
    """What a :class:`Ticket` made of an attempt: an answer to judge as usual
    (``result`` None), or a result decided by the extension; ``report`` for the
    recorder either way."""

    response: Response | None = None
    result: AttemptResult | None = None
    status: int | None = None
    error: str = ""
    report: AttemptReport | None = None
    #: Seconds to wait, for a delivery held without a request.
    held_for: float | None = None


class Ticket(Protocol):
    """What an extension hands one claimed delivery for its attempt: the attempt's
    requests go through :meth:`exchange`, which may add to them and answer for them."""

    @property
    def urgent(self) -> bool:
        """Whether the delivery goes first, on the engine's urgent loop and outside its
        host's cap (most of its time is spent elsewhere than at the host)."""

    async def exchange(self, url: str, size: int, post: Post) -> Exchange:
        """Make the attempt at ``url`` (a body of ``size`` bytes) through ``post``."""


@dataclass(frozen=True)
class Tickets:
    """What an extension makes of a claim: a ticket per delivery id that it takes part
    in, and the ids to hold back for a while, each with its reason and seconds."""

    tickets: dict[int, Ticket] = field(default_factory=dict)
    holds: dict[int, tuple[str, float]] = field(default_factory=dict)


@dataclass
class Extension:
    """A feature that takes part in delivery.  Subclass it and override the hooks."""

    #: What the extension is called in logs and in the steps the sweep counts.
    name: str = field(default="extension")

    def tickets(
        self, claimed: Sequence[ClaimedRow], messages: Mapping[int, MessageData]
    ) -> Tickets:
        """At the claim, before any of ``claimed`` is sent (``messages``: the message of
        each, by id)."""
        return Tickets()

    def published_first(self, hosts: Collection[str]) -> set[str]:
        """Which of ``hosts`` (those of a send's new deliveries) the extension wants served
        ahead of their lane's backlog: their deliveries are published on the priority
        lane rather than their message's."""
        return set()

    def park(self, holds: Sequence[Outcome]) -> list[Outcome]:
        """``holds`` (the claim's, and those the recorder meets) but those this extension
        parks itself, which then make no attempt, no history row and no signal."""
        return list(holds)

    def record(self, outcomes: Sequence[Outcome]) -> list[Outcome]:
        """Before the outcomes are saved, in a transaction of its own that commits first:
        what it writes is kept even if the claims were lost meanwhile.  It may change an
        outcome (a hold, a refusal), and returns them all."""
        return list(outcomes)

    def sweep_steps(self) -> dict[str, Callable[[], int]]:
        """Steps the periodic sweep runs, each returning how many rows it touched."""
        return {}

    def recovery_steps(self) -> dict[str, Callable[[], int]]:
        """Steps the leading worker's recovery pass runs, every heartbeat."""
        return {}

    def worker_starting(self) -> None:
        """In a worker's main process, before its pool starts."""

    def worker_stopping(self) -> None:
        """As a worker process stops, after its engine."""

    def register_admin(self, site: AdminSite) -> None:
        """Register the extension's admin pages."""

    def metric_families(self, ttl: float) -> Iterable[Metric]:
        """Gauges for ``/metrics``, from the database at most ``ttl`` seconds old (called
        only when ``prometheus-client`` is installed)."""
        return ()

    def delivery_inlines(self, delivery: Any) -> list[type[InlineModelAdmin[Any, Any]]]:
        """Inlines the extension adds to a delivery's admin page."""
        return []

    def host_links(self, host: str) -> list[tuple[str, str]]:
        """Links (label, URL) the extension adds to a host's admin page."""
        return []

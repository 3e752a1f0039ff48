"""Live progress of the demo: delivery counts by state, read from the database.

:func:`snapshot` counts the deliveries of some messages by state; rows a large
fan-out has not written yet count as queued.  :class:`ProgressLine` shows one
line refreshed in place on a terminal, or otherwise a line a second while
deliveries finish and one every five seconds while nothing does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TextIO

from django.db.models import Count

from django_outbox.models import Delivery, DeliveryState

SHOWN = ("queued", "sending", "delivered", "refused", "failed")


@dataclass(frozen=True)
class Snapshot:
    """Deliveries of the watched messages by state, at one moment."""

    at: float
    counts: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, state: str) -> int:
        return self.counts.get(state, 0)

    @property
    def live(self) -> int:
        return self["queued"] + self["sending"]

    @property
    def final(self) -> int:
        return self["delivered"] + self["refused"] + self["skipped"] + self["failed"]


def snapshot(expected: dict[int, int]) -> Snapshot:
    """Counts for the messages ``{message id: inbox count}``.

    ``waiting`` rows and rows not yet written by the fan-out's expansion are
    shown as ``queued``.
    """
    rows = (
        Delivery.objects.filter(message_id__in=list(expected))
        .order_by()
        .values_list("state")
        .annotate(n=Count("id"))
    )
    counts: dict[str, int] = {state: n for state, n in rows}
    unwritten = sum(expected.values()) - sum(counts.values())
    counts["queued"] = (
        counts.get(DeliveryState.QUEUED, 0) + counts.pop(DeliveryState.WAITING, 0) + unwritten
    )
    return Snapshot(time.monotonic(), counts)


class ProgressLine:
    """Shows snapshots: in place on a terminal, else at most one line a second."""

    def __init__(self, stream: TextIO, start: float) -> None:
        self.stream = stream
        self.start = start
        self.tty = stream.isatty()
        self._history: list[Snapshot] = []
        self._last_printed = 0.0
        self._printed_final = -1
        self._drawn = False

    def header(self) -> str:
        names = "".join(f"{name:>10}" for name in SHOWN)
        return f"{'time':>6}{names}{'done/s':>8}"

    def show(self, snap: Snapshot) -> None:
        # The rate over the last second or so, however often this is called.
        older = [s for s in self._history if snap.at - s.at >= 0.9]
        earlier = older[-1] if older else None
        self._history = [s for s in self._history if earlier is None or s.at >= earlier.at]
        self._history.append(snap)
        if not self.tty:
            # A line a second while deliveries finish, else one every five seconds.
            since = snap.at - self._last_printed
            if since < 1.0 or (since < 5.0 and snap.final == self._printed_final):
                return
            self._last_printed, self._printed_final = snap.at, snap.final
        rate = 0.0
        if earlier is not None:
            rate = (snap.final - earlier.final) / (snap.at - earlier.at)
        cells = "".join(f"{snap[name]:>10,}" for name in SHOWN)
        line = f"{snap.at - self.start:>5.1f}s{cells}{rate:>8,.0f}"
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own, without disturbing the refreshed line."""
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[2K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def done(self, snap: Snapshot) -> None:
        """The final counts, always on a line of their own (once)."""
        if not self.tty and self._last_printed == snap.at:
            return
        self._last_printed = 0.0
        tty, self.tty = self.tty, False
        if tty and self._drawn:
            self.stream.write("\r\x1b[2K")
        self.show(snap)
        self.tty = tty

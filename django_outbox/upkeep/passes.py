"""A pass of independent steps, as the recovery pass and the sweeper run them.

Each step runs whatever the others did: one that raises (the broker away, an
unreadable macaroon file after a rotation) is logged and counted as nothing done, and
the next runs.  Each is a step of the supervised part that runs the pass, when given
one, so that a step that hangs is seen for what it is (see
:mod:`django_outbox.worker.supervisor`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Protocol

logger = logging.getLogger("django_outbox.passes")


class Steps(Protocol):
    """What marks a step under way (a supervised part)."""

    def step(self, doing: str) -> AbstractContextManager[None]:
        """A context in which the step ``doing`` runs."""
        ...


def run_steps(
    steps: Mapping[str, Callable[[], int]], kind: str, part: Steps | None = None
) -> dict[str, int]:
    """Run each of ``steps`` in turn; how many rows each touched (0 for one that failed).
    ``kind`` names the pass in log lines and in the part's step."""
    counts: dict[str, int] = {}
    for name, step in steps.items():
        doing = f"{kind} step {name!r}"
        marked = part.step(doing) if part is not None else contextlib.nullcontext()
        try:
            with marked:
                counts[name] = step()
        except Exception as error:
            # One line each pass while the broker or the database is away.
            logger.warning("%s step %r failed: %r", kind, name, error)
            logger.debug("%s step %r failed", kind, name, exc_info=True)
            counts[name] = 0
    return counts

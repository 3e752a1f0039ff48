"""How long a delivery is held while its host is being paid: longer the more wait for it.

The claim holds the deliveries of a host being paid as much as it may be, and the
ledger holds those that meet a 402 meanwhile; both ask :func:`hold_for`, so that a
long queue for one host comes back rarely and spread out.
"""

from __future__ import annotations

import math
import random

#: Longest hold of a delivery whose host another delivery is paying, in seconds.
HOLD_LIMIT = 60.0


def hold_for(base: float, queued: int, factor: float | None = None) -> float:
    """Seconds to hold a delivery while its host is being paid.

    ``base``, longer the more deliveries wait for that host (``queued``): ``base`` times
    the power of two at or above ``queued / 2``, up to a minute, so that a long queue
    comes back rarely; times ``factor`` (0.75 to 1.25, :func:`spread` when not given), so that
    the deliveries held at different moments come back one after another.  A claim
    passes one factor for all its holds, and the powers of two leave few distinct
    values, so that its held deliveries come back in a few messages, not one each.
    """
    steps = float(2 ** math.ceil(math.log2(max(1.0, queued / 2))))
    return min(HOLD_LIMIT, base * steps) * (spread() if factor is None else factor)


def spread() -> float:
    """A random factor from 0.75 to 1.25, by which holds that begin together end apart."""
    return 0.75 + random.random() / 2

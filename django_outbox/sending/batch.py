"""What deliveries of one send share: tag, deadline, ordering and lane options."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django_outbox.sending.validation import check_batch_options


@dataclass(frozen=True)
class Batch:
    """Options for one ``outbox.send`` (or ``send_webhook``).

    ``tag`` finds the deliveries again (admin filter, signals); past
    ``deadline`` a delivery is given up rather than retried, so one dead
    server cannot hold a batch open; deliveries sharing an ``ordering_key``
    reach each inbox in the order they were sent (a ``Delete`` never overtakes
    its ``Create``); ``max_attempts`` lowers the retry budget; ``low_priority``
    sends in the ``outbox.low`` lane when ``OUTBOX_LOW_LANE`` is on;
    ``synchronize_collection`` adds a FEP-8fcf header (ActivityPub only).
    """

    tag: str | None = None
    deadline: datetime | None = None
    ordering_key: str | None = None
    max_attempts: int | None = None
    low_priority: bool = False
    synchronize_collection: bool = False

    def __post_init__(self) -> None:
        check_batch_options(
            self.tag,
            self.deadline,
            self.ordering_key,
            self.max_attempts,
            {
                "low_priority": self.low_priority,
                "synchronize_collection": self.synchronize_collection,
            },
        )

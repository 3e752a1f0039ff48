"""Settings of the outbox: how worker processes claim, send, beat, sweep and stop."""

from __future__ import annotations

from django_outbox.setting_groups.reading import read_setting


class WorkerSettings:
    """How worker processes claim, send, beat, sweep and stop."""

    @property
    def LEASE_SECONDS(self) -> float:
        """How long a claimed delivery is reserved for the worker that claimed it."""
        return float(read_setting("OUTBOX_LEASE_SECONDS", 300.0))

    @property
    def REDISPATCH_AFTER(self) -> float:
        """A due row unclaimed this long after its message was sent is dispatched again."""
        return float(read_setting("OUTBOX_REDISPATCH_AFTER", 900.0))

    @property
    def RETENTION_SECONDS(self) -> float:
        """Settled and failed rows older than this are pruned by the sweeper."""
        return float(read_setting("OUTBOX_RETENTION_SECONDS", 14 * 86400.0))

    @property
    def SWEEP_INTERVAL(self) -> float:
        """Seconds between sweeps in the beat schedule the package ships."""
        return float(read_setting("OUTBOX_SWEEP_INTERVAL", 30.0))

    @property
    def HEARTBEAT_INTERVAL(self) -> float:
        """Seconds between two heartbeats of a worker process (and recovery passes)."""
        return float(read_setting("OUTBOX_HEARTBEAT_INTERVAL", 3.0))

    @property
    def HEARTBEAT_TIMEOUT(self) -> float:
        """Seconds without a heartbeat after which a worker process counts as dead."""
        return float(read_setting("OUTBOX_HEARTBEAT_TIMEOUT", 15.0))

    @property
    def STOP_TIMEOUT(self) -> float:
        """Seconds a stopping worker waits for deliveries in flight before releasing them."""
        return float(read_setting("OUTBOX_STOP_TIMEOUT", 10.0))

    @property
    def STALL_TIMEOUT(self) -> float:
        """Seconds a part of a worker process may be stuck in one step (a batch save, a
        turn of the event loop, a claim being prepared, an application function) before
        the process counts as unfit and hands its work back (see docs/design.md)."""
        return float(read_setting("OUTBOX_STALL_TIMEOUT", 10.0))

    @property
    def EVENT_LOOP(self) -> str:
        """The event loops of a worker's engine: ``"asyncio"`` or ``"uvloop"``."""
        return str(read_setting("OUTBOX_EVENT_LOOP", "asyncio"))

    @property
    def CONCURRENCY(self) -> int:
        """Deliveries in flight at once in one worker process."""
        return int(read_setting("OUTBOX_CONCURRENCY", 256))

    @property
    def MAX_IN_FLIGHT(self) -> int:
        """Deliveries in flight in one worker process at most, counting those slower than
        two seconds, which stop counting against the concurrency."""
        return int(read_setting("OUTBOX_MAX_IN_FLIGHT", 4 * self.CONCURRENCY))

    @property
    def PER_HOST(self) -> int:
        """Deliveries in flight at once to one host from one worker process."""
        return int(read_setting("OUTBOX_PER_HOST", 2))

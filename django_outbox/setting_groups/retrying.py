"""Settings of the outbox: when a failed delivery is tried again, and when it is given up."""

from __future__ import annotations

from collections.abc import Callable

from django_outbox.setting_groups.reading import read_callable, read_setting


class RetrySettings:
    """When a failed delivery is tried again, and when it is given up."""

    @property
    def MAX_ATTEMPTS(self) -> int:
        """Attempts per delivery unless a batch asks for fewer."""
        return int(read_setting("OUTBOX_MAX_ATTEMPTS", 16))

    @property
    def RETRY_BASE(self) -> float:
        """Seconds before the first retry; the delay doubles after each attempt."""
        return float(read_setting("OUTBOX_RETRY_BASE", 30.0))

    @property
    def RETRY_CAP(self) -> float:
        """Longest wait between two attempts, in seconds."""
        return float(read_setting("OUTBOX_RETRY_CAP", 8 * 3600.0))

    @property
    def RETRY_AFTER_CAP(self) -> float:
        """Longest ``Retry-After`` that is honoured, in seconds."""
        return float(read_setting("OUTBOX_RETRY_AFTER_CAP", 24 * 3600.0))

    @property
    def THROTTLE_CAP(self) -> float:
        """Longest a ``429`` holds its host, in seconds, whatever its ``Retry-After``."""
        return float(read_setting("OUTBOX_THROTTLE_CAP", 300.0))

    @property
    def RELEASE_STEP(self) -> int:
        """Held deliveries of a host released early by each success that frees it."""
        return int(read_setting("OUTBOX_RELEASE_STEP", 4))

    @property
    def WAIT_AS_ASKED(self) -> bool:
        """Wait at least as long as ``Retry-After`` or an open breaker asks."""
        return bool(read_setting("OUTBOX_WAIT_AS_ASKED", True))

    @property
    def COUNTDOWN_LIMIT(self) -> float:
        """Waits up to this many seconds ride on a Celery countdown; longer are parked."""
        return float(read_setting("OUTBOX_COUNTDOWN_LIMIT", 300.0))

    @property
    def PERMANENT_STATUS(self) -> Callable[[int], bool]:
        """Predicate: does this HTTP status mean trying again cannot help?"""
        predicate = read_callable(
            "OUTBOX_PERMANENT_STATUS", "django_outbox.values.outcomes.permanent_status"
        )
        assert predicate is not None
        return predicate

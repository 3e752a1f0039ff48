"""Settings of the outbox: how hosts that fail are held back: breakers, unavailable hosts, disabled
endpoints."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast, get_args

from django_outbox.breakers.policy import BreakerScope
from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.setting_groups.reading import read_callable, read_setting

#: The values ``OUTBOX_BREAKER_SCOPE`` may take.
BREAKER_SCOPES = get_args(BreakerScope)


class HostHealthSettings:
    """How hosts that fail or throttle are held back: breakers, rates, unavailable hosts,
    disabled endpoints."""

    @property
    def BREAKER_THRESHOLD(self) -> int:
        """Failures in a row that open a destination's circuit breaker (0: no breaker)."""
        return int(read_setting("OUTBOX_BREAKER_THRESHOLD", 10))

    @property
    def BREAKER_COOL_OFF(self) -> float:
        """Seconds an open breaker holds deliveries before one probe is let through."""
        return float(read_setting("OUTBOX_BREAKER_COOL_OFF", 60.0))

    @property
    def BREAKER_SCOPE(self) -> BreakerScope:
        """``"host"`` (default) or ``"inbox"``: what one breaker is kept for."""
        scope = read_setting("OUTBOX_BREAKER_SCOPE", "host")
        if scope not in BREAKER_SCOPES:
            raise OutboxConfigurationError(
                f"OUTBOX_BREAKER_SCOPE must be 'host' or 'inbox', not {scope!r}."
            )
        return cast(BreakerScope, scope)

    @property
    def UNAVAILABLE_AFTER_DAYS(self) -> int:
        """Distinct days of failures, with no success, after which a host is unavailable."""
        return int(read_setting("OUTBOX_UNAVAILABLE_AFTER_DAYS", 7))

    @property
    def WEBHOOK_DISABLE_AFTER_DAYS(self) -> int:
        """Distinct days of an endpoint's own failures, with no success, after which a
        webhook endpoint is disabled (0: never)."""
        return int(read_setting("OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS", 5))

    @property
    def SKIP_UNAVAILABLE(self) -> Callable[[str, str], bool]:
        """Predicate ``(inbox, activity_type)``: skip this delivery to an unavailable host?"""
        predicate = read_callable(
            "OUTBOX_SKIP_UNAVAILABLE", "django_outbox.destinations.availability.skip_unless_follow"
        )
        assert predicate is not None
        return predicate

    @property
    def HOST_RATE(self) -> float | None:
        """Requests per second to one host, across all workers; ``None``: no limit."""
        value = read_setting("OUTBOX_HOST_RATE", None)
        return None if value is None else float(value)

    @property
    def HOST_RATES(self) -> dict[str, float | None]:
        """Each named host's own rate (``None``: no limit), instead of ``HOST_RATE``."""
        value = read_setting("OUTBOX_HOST_RATES", {})
        if not isinstance(value, dict):
            raise OutboxConfigurationError("OUTBOX_HOST_RATES must be a dict of host: rate.")
        return {
            str(host).lower(): None if rate is None else float(rate) for host, rate in value.items()
        }

    @property
    def RATE_FLOOR(self) -> float:
        """Requests per second a host resumes at after its breaker closed or its pause
        ended, and the lowest a ``429`` slows it to."""
        return float(read_setting("OUTBOX_RATE_FLOOR", 1.0))

    @property
    def SLOW_START_SECONDS(self) -> float:
        """Seconds a host takes to grow back to its rate after a slow start or slow-down."""
        return float(read_setting("OUTBOX_SLOW_START_SECONDS", 60.0))

"""Settings of the outbox: what workers share through caches: breakers, schemes, counters,
unavailable hosts."""

from __future__ import annotations

from django_outbox.setting_groups.reading import read_setting


class SharingSettings:
    """What workers share through caches: breakers, schemes, counters, unavailable hosts."""

    @property
    def BREAKER_CACHE(self) -> str | None:
        """django-redis cache alias holding breakers; ``None`` keeps them in memory."""
        value = read_setting("OUTBOX_BREAKER_CACHE", None)
        return None if value is None else str(value)

    @property
    def SCHEME_CACHE(self) -> str:
        """Cache alias remembering which signature scheme each host accepts."""
        return str(read_setting("OUTBOX_SCHEME_CACHE", "default"))

    @property
    def HOSTS_REFRESH(self) -> float:
        """Seconds a worker process trusts its copy of the unavailable hosts."""
        return float(read_setting("OUTBOX_HOSTS_REFRESH", 60.0))

    @property
    def METRICS(self) -> bool:
        """Whether workers count what they do for metrics and ``outbox status``."""
        return bool(read_setting("OUTBOX_METRICS", True))

    @property
    def METRICS_CACHE(self) -> str | None:
        """django-redis cache alias keeping the workers' counters; ``None``: this process."""
        value = read_setting("OUTBOX_METRICS_CACHE", self.BREAKER_CACHE)
        return None if value is None else str(value)

    @property
    def METRICS_TTL(self) -> float:
        """Seconds a scrape of the metrics reuses its snapshot of the database."""
        return float(read_setting("OUTBOX_METRICS_TTL", 30.0))

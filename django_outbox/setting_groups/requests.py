"""Settings of the outbox: how each request goes out: where it may go, how long it may take, what
it may read."""

from __future__ import annotations

from django_outbox.setting_groups.reading import MiB, read_setting


class RequestSettings:
    """How each request goes out: where it may go, how long it may take, what it may read."""

    @property
    def ALLOWED_NETWORKS(self) -> tuple[str, ...]:
        """Networks inboxes may resolve to although they are not public."""
        return tuple(read_setting("OUTBOX_ALLOWED_NETWORKS", ()))

    @property
    def USER_AGENT(self) -> str:
        """User-Agent header of every delivery."""
        return str(
            read_setting(
                "OUTBOX_USER_AGENT", "django-outbox/0.1 (+https://pypi.org/p/django-outbox)"
            )
        )

    @property
    def CONNECT_TIMEOUT(self) -> float:
        """Seconds to wait for a connection."""
        return float(read_setting("OUTBOX_CONNECT_TIMEOUT", 5.0))

    @property
    def READ_TIMEOUT(self) -> float:
        """Seconds a request may wait for the next byte of the answer (Mastodon: 10)."""
        return float(read_setting("OUTBOX_READ_TIMEOUT", 10.0))

    @property
    def TOTAL_TIMEOUT(self) -> float:
        """Seconds one request may take in all, however the server trickles."""
        return float(read_setting("OUTBOX_TOTAL_TIMEOUT", 30.0))

    @property
    def MAX_RESPONSE_BYTES(self) -> int:
        """Most of a response body that is read."""
        return int(read_setting("OUTBOX_MAX_RESPONSE_BYTES", MiB))

    @property
    def CA_BUNDLE(self) -> str | None:
        """CA bundle for TLS verification; ``None`` uses the system's."""
        value = read_setting("OUTBOX_CA_BUNDLE", None)
        return None if value is None else str(value)

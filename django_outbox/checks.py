"""System checks for settings that would make delivery fail or misbehave."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from django_outbox.breakers.rates import RatePolicy
from django_outbox.conf import conf
from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.signing.http import Scheme
from django_outbox.transport.addresses import parse_networks
from django_outbox.transport.loops import loop_factory
from django_outbox.values import columns

_POSITIVE = (
    "MAX_BODY_BYTES",
    "MAX_INBOXES",
    "CHUNK_SIZE",
    "MAX_ATTEMPTS",
    "CONCURRENCY",
    "MAX_IN_FLIGHT",
    "PER_HOST",
    "LEASE_SECONDS",
    "THROTTLE_CAP",
    "RELEASE_STEP",
    "TOTAL_TIMEOUT",
    "CONNECT_TIMEOUT",
    "READ_TIMEOUT",
    "BREAKER_COOL_OFF",
    "HEARTBEAT_INTERVAL",
    "HEARTBEAT_TIMEOUT",
    "STALL_TIMEOUT",
)
#: Heartbeats a live process may miss in a row before it counts as dead, at least.
_BEATS_PER_TIMEOUT = 3


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check every ``OUTBOX_*`` setting that can be checked without a network."""
    errors = _check_resolvers()
    if conf.FIRST_SCHEME not in {s.value for s in Scheme}:
        errors.append(
            Error(
                f"OUTBOX_FIRST_SCHEME is {conf.FIRST_SCHEME!r}.",
                hint=f"Use one of {sorted(s.value for s in Scheme)}.",
                id="django_outbox.E002",
            )
        )
    try:
        conf.BREAKER_SCOPE  # noqa: B018 - reading it is the check
    except OutboxConfigurationError as error:
        errors.append(Error(str(error), id="django_outbox.E003"))
    try:
        parse_networks(conf.ALLOWED_NETWORKS)
    except ValueError as error:
        errors.append(Error(f"OUTBOX_ALLOWED_NETWORKS: {error}", id="django_outbox.E004"))
    errors.extend(_check_caches())
    errors.extend(_check_payments())
    try:
        loop_factory(conf.EVENT_LOOP)
    except OutboxConfigurationError as error:
        errors.append(Error(str(error), id="django_outbox.E018"))
    for name in _POSITIVE:
        try:
            value = getattr(conf, name)
        except (TypeError, ValueError):
            value = 0
        if value <= 0:
            errors.append(
                Error(f"OUTBOX_{name} must be a positive number.", id="django_outbox.E006")
            )
    if conf.MAX_ATTEMPTS > columns.SMALL_INTEGER:
        errors.append(
            Error(
                f"OUTBOX_MAX_ATTEMPTS must be at most {columns.SMALL_INTEGER}.",
                hint="Attempts are stored in a small integer column.",
                id="django_outbox.E015",
            )
        )
    errors.extend(_check_disable_after_days())
    errors.extend(_check_rates())
    if conf.LEASE_SECONDS < 2 * conf.TOTAL_TIMEOUT + 10:
        errors.append(
            Warning(
                "OUTBOX_LEASE_SECONDS is shorter than two requests of OUTBOX_TOTAL_TIMEOUT "
                "plus 10 s.",
                hint="A slow inbox can outlast the lease, and the delivery is then sent twice.",
                id="django_outbox.W003",
            )
        )
    if conf.HEARTBEAT_TIMEOUT < _BEATS_PER_TIMEOUT * conf.HEARTBEAT_INTERVAL:
        errors.append(
            Error(
                "OUTBOX_HEARTBEAT_TIMEOUT is shorter than three OUTBOX_HEARTBEAT_INTERVALs.",
                hint="A live worker that misses a beat or two (a slow database) would count as "
                "dead, and what it is sending would be sent again.",
                id="django_outbox.E016",
            )
        )
    errors.extend(_check_sqlite())
    return errors


def _check_disable_after_days() -> list[CheckMessage]:
    """``OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS``: a whole number of days that fits its column
    (E019)."""
    value = getattr(settings, "OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS", 5)
    if type(value) is int and 0 <= value <= columns.SMALL_INTEGER:
        return []
    return [
        Error(
            f"OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS is {value!r}.",
            hint=f"Use a whole number of days from 1 to {columns.SMALL_INTEGER}, or 0 never "
            "to disable an endpoint.",
            id="django_outbox.E019",
        )
    ]


def _check_rates() -> list[CheckMessage]:
    """``OUTBOX_HOST_RATE``, ``OUTBOX_HOST_RATES``, ``OUTBOX_RATE_FLOOR`` and
    ``OUTBOX_SLOW_START_SECONDS``: positive rates (or ``None``), a non-negative span
    (E020)."""
    try:
        named = conf.HOST_RATES
        for rate in (conf.HOST_RATE, *named.values()):
            RatePolicy(rate, conf.RATE_FLOOR, conf.SLOW_START_SECONDS)
    except (OutboxConfigurationError, TypeError, ValueError) as error:
        return [
            Error(
                f"Host rates: {error}",
                hint="OUTBOX_HOST_RATE and the values of the OUTBOX_HOST_RATES dict are "
                "requests per second above 0, or None for no limit; OUTBOX_RATE_FLOOR is "
                "above 0; OUTBOX_SLOW_START_SECONDS is 0 or more.",
                id="django_outbox.E020",
            )
        ]
    return []


def _check_sqlite() -> list[CheckMessage]:
    """SQLite in production (W002), and without ``IMMEDIATE`` transactions (W005)."""
    errors: list[CheckMessage] = []
    database: dict[str, Any] = settings.DATABASES.get("default", {})
    if not str(database.get("ENGINE", "")).endswith("sqlite3"):
        return errors
    options: dict[str, Any] = database.get("OPTIONS") or {}
    if options.get("transaction_mode") != "IMMEDIATE":
        errors.append(
            Warning(
                "django_outbox is running on SQLite with deferred transactions.",
                hint='Set DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE" '
                "(Django 5.1+): two processes that read and then write in a transaction "
                'otherwise fail at once with "database is locked" instead of waiting.',
                id="django_outbox.W005",
            )
        )
    if not settings.DEBUG:
        errors.append(
            Warning(
                "django_outbox is running on SQLite with DEBUG off.",
                hint="SQLite serialises every write; several workers will wait on each other. "
                "Use PostgreSQL in production.",
                id="django_outbox.W002",
            )
        )
    return errors


def _check_resolvers() -> list[CheckMessage]:
    """Each resolver that is set must import; at least one of the two must be set.

    ``OUTBOX_KEY_RESOLVER`` signs ActivityPub sends, ``OUTBOX_WEBHOOK_SECRET_RESOLVER``
    webhooks: a project that sends only one kind sets only its resolver.
    """
    errors: list[CheckMessage] = []
    key_set = getattr(settings, "OUTBOX_KEY_RESOLVER", None) is not None
    webhook_set = getattr(settings, "OUTBOX_WEBHOOK_SECRET_RESOLVER", None) is not None
    if not key_set and not webhook_set:
        errors.append(
            Error(
                "Neither OUTBOX_KEY_RESOLVER nor OUTBOX_WEBHOOK_SECRET_RESOLVER is set.",
                hint="Set OUTBOX_KEY_RESOLVER to send ActivityPub activities, "
                "OUTBOX_WEBHOOK_SECRET_RESOLVER to send webhooks, or both.",
                id="django_outbox.E001",
            )
        )
    for is_set, name, check_id in (
        (key_set, "KEY_RESOLVER", "django_outbox.E001"),
        (webhook_set, "WEBHOOK_SECRET_RESOLVER", "django_outbox.E007"),
    ):
        try:
            if is_set:
                getattr(conf, name)
        except OutboxConfigurationError as error:
            errors.append(Error(str(error), id=check_id))
    try:
        conf.LOCAL_HOSTS  # noqa: B018 - reading it is the check
    except OutboxConfigurationError as error:
        errors.append(Error(str(error), id="django_outbox.E008"))
    return errors


def _check_caches() -> list[CheckMessage]:
    alias = conf.BREAKER_CACHE
    caches = getattr(settings, "CACHES", {})
    if alias is None:
        if settings.DEBUG:
            return []
        return [
            Warning(
                "Circuit breakers are kept in each worker process's memory.",
                hint="Set OUTBOX_BREAKER_CACHE to a django-redis cache alias so that every "
                "worker shares them.",
                id="django_outbox.W001",
            )
        ]
    backend = caches.get(alias, {}).get("BACKEND", "")
    if backend != "django_redis.cache.RedisCache":
        return [
            Error(
                f"OUTBOX_BREAKER_CACHE names {alias!r}, which is not a django-redis cache.",
                hint="Point it at a CACHES entry with BACKEND 'django_redis.cache.RedisCache'.",
                id="django_outbox.E005",
            )
        ]
    return _check_socket_timeouts(caches, {alias, conf.SCHEME_CACHE, conf.METRICS_CACHE})


def _check_socket_timeouts(caches: dict[str, Any], aliases: set[str | None]) -> list[CheckMessage]:
    """django-redis caches the workers use without a socket timeout (W006)."""
    warnings: list[CheckMessage] = []
    for alias in sorted(a for a in aliases if a is not None):
        entry = caches.get(alias, {})
        if entry.get("BACKEND") != "django_redis.cache.RedisCache":
            continue
        if not (entry.get("OPTIONS") or {}).get("SOCKET_TIMEOUT"):
            warnings.append(
                Warning(
                    f"The cache {alias!r} has no SOCKET_TIMEOUT.",
                    hint="A Redis that stops answering (rather than refusing) then blocks "
                    "the workers' breaker and scheme calls for as long as it does; set "
                    "OPTIONS {'SOCKET_TIMEOUT': 5, 'SOCKET_CONNECT_TIMEOUT': 5}.",
                    id="django_outbox.W006",
                )
            )
    return warnings


def _check_payments() -> list[CheckMessage]:
    """``OUTBOX_PAYMENTS``, when set: paid push's own checks (E010-E014, E017)."""
    if getattr(settings, "OUTBOX_PAYMENTS", None) is None:
        return []
    from django_outbox.payments.setting_checks import check_payments

    return check_payments()

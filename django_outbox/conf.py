"""Settings, read lazily so that ``override_settings`` takes effect at once.

Every setting is a plain ``OUTBOX_*`` name in the project's settings module;
:data:`conf` exposes each as a typed property with its default.  Nothing is
read at import time.  What was read is remembered until Django's
``setting_changed`` signal (sent by ``override_settings``) says a setting
changed: a worker reads several settings for every delivery, and asking Django
for one the project does not set raises and catches an ``AttributeError`` each
time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast, get_args

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from django_outbox.breakers.policy import BreakerScope
from django_outbox.exceptions import OutboxConfigurationError
from django_outbox.sending.keys import KeyResolver

if TYPE_CHECKING:
    from django_outbox.payments.settings import PaymentSettings
    from django_outbox.signing.webhooks import WebhookSecretResolver

MiB = 1 << 20
_BREAKER_SCOPES = get_args(BreakerScope)

_UNSET = object()
#: Settings read so far (``_UNSET`` for those the project does not set).
_read: dict[str, Any] = {}
#: Bumped, under the lock, each time a setting changes: a value read before is not kept.
_generation = [0]
_read_lock = threading.Lock()


def _get(name: str, default: Any) -> Any:
    value = _read.get(name, _UNSET)
    if value is _UNSET and name not in _read:
        generation = _generation[0]
        value = getattr(settings, name, _UNSET)
        with _read_lock:
            if generation == _generation[0]:
                _read[name] = value
    return default if value is _UNSET else value


def _forget(**_: Any) -> None:
    """Forget the settings read so far (a receiver of ``setting_changed``)."""
    with _read_lock:
        _generation[0] += 1
        _read.clear()


setting_changed.connect(_forget, dispatch_uid="django_outbox.conf")


def _callable(name: str, default: str | None) -> Callable[..., Any] | None:
    value = _get(name, default)
    if value is None or callable(value):
        return value  # type: ignore[no-any-return]
    if not isinstance(value, str):
        raise OutboxConfigurationError(f"{name} must be a dotted path or a callable.")
    try:
        imported = import_string(value)
    except ImportError as error:
        raise OutboxConfigurationError(f"{name}: cannot import {value!r}: {error}") from error
    return imported  # type: ignore[no-any-return]


class Settings:
    """The package's settings; see ``docs/configuration.md`` for each one."""

    @property
    def KEY_RESOLVER(self) -> KeyResolver:
        """The application's key resolver (required): actor id -> SenderKey or None."""
        resolver = _callable("OUTBOX_KEY_RESOLVER", None)
        if resolver is None:
            raise OutboxConfigurationError(
                "OUTBOX_KEY_RESOLVER is not set: name the callable that returns a "
                "django_outbox.sending.keys.SenderKey for an actor."
            )
        return cast(KeyResolver, resolver)

    @property
    def WEBHOOK_SECRET_RESOLVER(self) -> WebhookSecretResolver:
        """The application's webhook secret resolver: (sender, endpoint) -> secrets or None."""
        resolver = _callable("OUTBOX_WEBHOOK_SECRET_RESOLVER", None)
        if resolver is None:
            raise OutboxConfigurationError(
                "OUTBOX_WEBHOOK_SECRET_RESOLVER is not set: name the callable that returns "
                "the webhook secrets of a sender's endpoint."
            )
        return cast("WebhookSecretResolver", resolver)

    @property
    def PREFER_SHARED_INBOX(self) -> bool:
        """Whether ``send`` reaches recipients through their shared inbox when they have one."""
        return bool(_get("OUTBOX_PREFER_SHARED_INBOX", True))

    @property
    def LOCAL_HOSTS(self) -> tuple[str, ...]:
        """Hosts ``send`` never delivers to, besides the host of the sender's actor id."""
        value = _get("OUTBOX_LOCAL_HOSTS", None) or ()
        if isinstance(value, list | tuple | set | frozenset) and all(
            isinstance(host, str) and host for host in value
        ):
            return tuple(value)
        raise OutboxConfigurationError("OUTBOX_LOCAL_HOSTS must be a list of host names.")

    @property
    def SENDER_GONE(self) -> Callable[[str], bool] | None:
        """The key resolver's optional ``gone(actor_id)``: has the sender gone for good?"""
        gone = getattr(self.KEY_RESOLVER, "gone", None)
        return gone if callable(gone) else None

    @property
    def MAX_BODY_BYTES(self) -> int:
        """Largest serialised activity ``send`` accepts."""
        return int(_get("OUTBOX_MAX_BODY_BYTES", MiB))

    @property
    def MAX_INBOXES(self) -> int:
        """Most distinct inboxes one ``send`` accepts (100,000: every server of the
        fediverse, about 30,000 today, three times over)."""
        return int(_get("OUTBOX_MAX_INBOXES", 100_000))

    @property
    def PRIORITY_MAX_INBOXES(self) -> int:
        """A send to at most this many inboxes goes to the priority lane."""
        return int(_get("OUTBOX_PRIORITY_MAX_INBOXES", 5))

    @property
    def LOW_LANE(self) -> bool:
        """Whether ``Batch(low_priority=True)`` uses the ``outbox.low`` queue."""
        return bool(_get("OUTBOX_LOW_LANE", False))

    @property
    def INLINE_FANOUT(self) -> int:
        """Up to this many inboxes, ``send`` writes delivery rows itself."""
        return int(_get("OUTBOX_INLINE_FANOUT", 500))

    @property
    def CHUNK_SIZE(self) -> int:
        """Deliveries carried by one Celery message."""
        return int(_get("OUTBOX_CHUNK_SIZE", 100))

    @property
    def FIRST_SCHEME(self) -> str:
        """Signature scheme tried first with a host that has accepted none yet."""
        return str(_get("OUTBOX_FIRST_SCHEME", "draft-cavage"))

    @property
    def MAX_ATTEMPTS(self) -> int:
        """Attempts per delivery unless a batch asks for fewer."""
        return int(_get("OUTBOX_MAX_ATTEMPTS", 16))

    @property
    def RETRY_BASE(self) -> float:
        """Seconds before the first retry; the delay doubles after each attempt."""
        return float(_get("OUTBOX_RETRY_BASE", 30.0))

    @property
    def RETRY_CAP(self) -> float:
        """Longest wait between two attempts, in seconds."""
        return float(_get("OUTBOX_RETRY_CAP", 8 * 3600.0))

    @property
    def RETRY_AFTER_CAP(self) -> float:
        """Longest ``Retry-After`` that is honoured, in seconds."""
        return float(_get("OUTBOX_RETRY_AFTER_CAP", 24 * 3600.0))

    @property
    def THROTTLE_CAP(self) -> float:
        """Longest a ``429`` holds its host, in seconds, whatever its ``Retry-After``."""
        return float(_get("OUTBOX_THROTTLE_CAP", 300.0))

    @property
    def RELEASE_STEP(self) -> int:
        """Held deliveries of a host released early by each success that frees it."""
        return int(_get("OUTBOX_RELEASE_STEP", 4))

    @property
    def HOST_RATE(self) -> float | None:
        """Requests per second to one host, across all workers; ``None``: no limit."""
        value = _get("OUTBOX_HOST_RATE", None)
        return None if value is None else float(value)

    @property
    def HOST_RATES(self) -> dict[str, float | None]:
        """Each named host's own rate (``None``: no limit), instead of ``HOST_RATE``."""
        value = _get("OUTBOX_HOST_RATES", {})
        if not isinstance(value, dict):
            raise OutboxConfigurationError("OUTBOX_HOST_RATES must be a dict of host: rate.")
        return {
            str(host).lower(): None if rate is None else float(rate) for host, rate in value.items()
        }

    @property
    def RATE_FLOOR(self) -> float:
        """Requests per second a host resumes at after its breaker closed, and the
        lowest a ``429`` slows it to."""
        return float(_get("OUTBOX_RATE_FLOOR", 1.0))

    @property
    def SLOW_START_SECONDS(self) -> float:
        """Seconds a host takes to grow back to its rate after a slow start or slow-down."""
        return float(_get("OUTBOX_SLOW_START_SECONDS", 60.0))

    @property
    def WAIT_AS_ASKED(self) -> bool:
        """Wait at least as long as ``Retry-After`` or an open breaker asks."""
        return bool(_get("OUTBOX_WAIT_AS_ASKED", True))

    @property
    def COUNTDOWN_LIMIT(self) -> float:
        """Waits up to this many seconds ride on a Celery countdown; longer are parked."""
        return float(_get("OUTBOX_COUNTDOWN_LIMIT", 300.0))

    @property
    def LEASE_SECONDS(self) -> float:
        """How long a claimed delivery is reserved for the worker that claimed it."""
        return float(_get("OUTBOX_LEASE_SECONDS", 300.0))

    @property
    def REDISPATCH_AFTER(self) -> float:
        """A due row unclaimed this long after its message was sent is dispatched again."""
        return float(_get("OUTBOX_REDISPATCH_AFTER", 900.0))

    @property
    def RETENTION_SECONDS(self) -> float:
        """Settled and failed rows older than this are pruned by the sweeper."""
        return float(_get("OUTBOX_RETENTION_SECONDS", 14 * 86400.0))

    @property
    def SWEEP_INTERVAL(self) -> float:
        """Seconds between sweeps in the beat schedule the package ships."""
        return float(_get("OUTBOX_SWEEP_INTERVAL", 30.0))

    @property
    def HEARTBEAT_INTERVAL(self) -> float:
        """Seconds between two heartbeats of a worker process (and recovery passes)."""
        return float(_get("OUTBOX_HEARTBEAT_INTERVAL", 3.0))

    @property
    def HEARTBEAT_TIMEOUT(self) -> float:
        """Seconds without a heartbeat after which a worker process counts as dead."""
        return float(_get("OUTBOX_HEARTBEAT_TIMEOUT", 15.0))

    @property
    def STOP_TIMEOUT(self) -> float:
        """Seconds a stopping worker waits for deliveries in flight before releasing them."""
        return float(_get("OUTBOX_STOP_TIMEOUT", 10.0))

    @property
    def STALL_TIMEOUT(self) -> float:
        """Seconds a part of a worker process may be stuck in one step (a batch save, a
        turn of the event loop, a claim being prepared, an application function) before
        the process counts as unfit and hands its work back (see docs/design.md)."""
        return float(_get("OUTBOX_STALL_TIMEOUT", 10.0))

    @property
    def PERMANENT_STATUS(self) -> Callable[[int], bool]:
        """Predicate: does this HTTP status mean trying again cannot help?"""
        predicate = _callable(
            "OUTBOX_PERMANENT_STATUS", "django_outbox.values.outcomes.permanent_status"
        )
        assert predicate is not None
        return predicate

    @property
    def SENDER_GONE_STATUSES(self) -> frozenset[int]:
        """Statuses after which the resolver is asked whether the sender is gone."""
        return frozenset(int(s) for s in _get("OUTBOX_SENDER_GONE_STATUSES", ()))

    @property
    def ALLOWED_NETWORKS(self) -> tuple[str, ...]:
        """Networks inboxes may resolve to although they are not public."""
        return tuple(_get("OUTBOX_ALLOWED_NETWORKS", ()))

    @property
    def USER_AGENT(self) -> str:
        """User-Agent header of every delivery."""
        return str(
            _get("OUTBOX_USER_AGENT", "django-outbox/0.1 (+https://pypi.org/p/django-outbox)")
        )

    @property
    def CONNECT_TIMEOUT(self) -> float:
        """Seconds to wait for a connection."""
        return float(_get("OUTBOX_CONNECT_TIMEOUT", 5.0))

    @property
    def READ_TIMEOUT(self) -> float:
        """Seconds a request may wait for the next byte of the answer (Mastodon: 10)."""
        return float(_get("OUTBOX_READ_TIMEOUT", 10.0))

    @property
    def TOTAL_TIMEOUT(self) -> float:
        """Seconds one request may take in all, however the server trickles."""
        return float(_get("OUTBOX_TOTAL_TIMEOUT", 30.0))

    @property
    def MAX_RESPONSE_BYTES(self) -> int:
        """Most of a response body that is read."""
        return int(_get("OUTBOX_MAX_RESPONSE_BYTES", MiB))

    @property
    def CA_BUNDLE(self) -> str | None:
        """CA bundle for TLS verification; ``None`` uses the system's."""
        value = _get("OUTBOX_CA_BUNDLE", None)
        return None if value is None else str(value)

    @property
    def EVENT_LOOP(self) -> str:
        """The event loops of a worker's engine: ``"asyncio"`` or ``"uvloop"``."""
        return str(_get("OUTBOX_EVENT_LOOP", "asyncio"))

    @property
    def CONCURRENCY(self) -> int:
        """Deliveries in flight at once in one worker process."""
        return int(_get("OUTBOX_CONCURRENCY", 256))

    @property
    def MAX_IN_FLIGHT(self) -> int:
        """Deliveries in flight in one worker process at most, counting those slower than
        two seconds, which stop counting against the concurrency."""
        return int(_get("OUTBOX_MAX_IN_FLIGHT", 4 * self.CONCURRENCY))

    @property
    def PER_HOST(self) -> int:
        """Deliveries in flight at once to one host from one worker process."""
        return int(_get("OUTBOX_PER_HOST", 2))

    @property
    def SCHEME_CACHE(self) -> str:
        """Cache alias remembering which signature scheme each host accepts."""
        return str(_get("OUTBOX_SCHEME_CACHE", "default"))

    @property
    def UNAVAILABLE_AFTER_DAYS(self) -> int:
        """Distinct days of failures, with no success, after which a host is unavailable."""
        return int(_get("OUTBOX_UNAVAILABLE_AFTER_DAYS", 7))

    @property
    def WEBHOOK_DISABLE_AFTER_DAYS(self) -> int:
        """Distinct days of an endpoint's own failures, with no success, after which a
        webhook endpoint is disabled (0: never)."""
        return int(_get("OUTBOX_WEBHOOK_DISABLE_AFTER_DAYS", 5))

    @property
    def HOSTS_REFRESH(self) -> float:
        """Seconds a worker process trusts its copy of the unavailable hosts."""
        return float(_get("OUTBOX_HOSTS_REFRESH", 60.0))

    @property
    def SKIP_UNAVAILABLE(self) -> Callable[[str, str], bool]:
        """Predicate ``(inbox, activity_type)``: skip this delivery to an unavailable host?"""
        predicate = _callable(
            "OUTBOX_SKIP_UNAVAILABLE", "django_outbox.destinations.availability.skip_unless_follow"
        )
        assert predicate is not None
        return predicate

    @property
    def COLLECTION_SYNCHRONIZATION(self) -> Callable[[str, str], str | None] | None:
        """Callable ``(sender, inbox)`` returning a FEP-8fcf header value, or ``None``."""
        return _callable("OUTBOX_COLLECTION_SYNCHRONIZATION", None)

    @property
    def BREAKER_THRESHOLD(self) -> int:
        """Failures in a row that open a destination's circuit breaker (0: no breaker)."""
        return int(_get("OUTBOX_BREAKER_THRESHOLD", 10))

    @property
    def BREAKER_COOL_OFF(self) -> float:
        """Seconds an open breaker holds deliveries before one probe is let through."""
        return float(_get("OUTBOX_BREAKER_COOL_OFF", 60.0))

    @property
    def BREAKER_SCOPE(self) -> BreakerScope:
        """``"host"`` (default) or ``"inbox"``: what one breaker is kept for."""
        scope = _get("OUTBOX_BREAKER_SCOPE", "host")
        if scope not in _BREAKER_SCOPES:
            raise OutboxConfigurationError(
                f"OUTBOX_BREAKER_SCOPE must be 'host' or 'inbox', not {scope!r}."
            )
        return cast(BreakerScope, scope)

    @property
    def BREAKER_CACHE(self) -> str | None:
        """django-redis cache alias holding breakers; ``None`` keeps them in memory."""
        value = _get("OUTBOX_BREAKER_CACHE", None)
        return None if value is None else str(value)

    @property
    def METRICS(self) -> bool:
        """Whether workers count what they do for metrics and ``outbox status``."""
        return bool(_get("OUTBOX_METRICS", True))

    @property
    def METRICS_CACHE(self) -> str | None:
        """django-redis cache alias keeping the workers' counters; ``None``: this process."""
        value = _get("OUTBOX_METRICS_CACHE", self.BREAKER_CACHE)
        return None if value is None else str(value)

    @property
    def METRICS_TTL(self) -> float:
        """Seconds a scrape of the metrics reuses its snapshot of the database."""
        return float(_get("OUTBOX_METRICS_TTL", 30.0))

    @property
    def PAYMENTS(self) -> PaymentSettings | None:
        """``OUTBOX_PAYMENTS``: how to pay destinations that answer 402, or None (pay nothing)."""
        value = _get("OUTBOX_PAYMENTS", None)
        if value is None:
            return None
        from django_outbox.payments.settings import read_payments

        return read_payments(value)


conf = Settings()

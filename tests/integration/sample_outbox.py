"""A day in the life of an outbox, written straight to the tables (for pages to show).

Deliveries finished over the last 24 hours to forty hosts, a fan-out under way,
a backlog that has been due for a few minutes, hosts that fail (one marked
unavailable, one with an open breaker) with their attempt history (late successes
too), and recent attempt times in the metrics store.  Deterministic: the same rows every time.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from hashlib import sha256

from django.utils import timezone

from django_outbox.breakers import BreakerPolicy
from django_outbox.breakers.configured import configured_store
from django_outbox.counters.shared import configured_metrics_store
from django_outbox.models import Attempt, Delivery, DeliveryState, Host, Lane, Message
from django_outbox.status.timeline import forget_ended_hours
from testproject.demo.keys import ACTOR

HOSTS = [f"social{i}.example" for i in range(36)] + [
    "dead.example",
    "slow.example",
    "flaky.example",
    "gone.example",
]


def _message(tag: str, created_minutes_ago: float, inboxes: int) -> Message:
    body = b'{"type": "Create"}'
    return Message.objects.create(
        sender=ACTOR,
        body=body,
        body_sha256=sha256(body).digest(),
        activity_type="Create",
        tag=tag,
        max_attempts=16,
        inbox_count=inboxes,
        created_at=timezone.now() - timedelta(minutes=created_minutes_ago),
    )


def fill(finished: int = 3000) -> dict[str, int]:
    """Write the sample; returns how many deliveries of each state it wrote."""
    rng = random.Random(42)
    now = timezone.now()
    configured_metrics_store().clear()
    forget_ended_hours()
    rows: list[Delivery] = []
    old = _message("post-1041", 24 * 60, finished)
    for i in range(finished):
        host = HOSTS[i % 36] if i % 25 else rng.choice(HOSTS[36:])
        age = timedelta(minutes=rng.triangular(0, 24 * 60, 40))
        state = DeliveryState.DELIVERED
        if host == "gone.example":
            state = DeliveryState.REFUSED
        elif host == "dead.example" and i % 2:
            state = DeliveryState.FAILED
        done = now - age
        rows.append(
            Delivery(
                message=old,
                inbox=f"https://{host}/users/u{i}/inbox",
                host=host,
                state=state,
                attempts=1 if state != DeliveryState.FAILED else 16,
                last_status={"refused": 410, "failed": 503}.get(state, 202),
                last_error={"refused": "HTTP 410", "failed": "HTTP 503"}.get(state, ""),
                created_at=done - timedelta(seconds=rng.uniform(0.2, 3)),
                finished_at=done,
            )
        )
    fan_out = _message("post-1042", 4, 1200)
    for i in range(1200):
        host = HOSTS[i % 40]
        live = i % 3 == 0
        rows.append(
            Delivery(
                message=fan_out,
                inbox=f"https://{host}/users/f{i}/inbox",
                host=host,
                state=DeliveryState.QUEUED if live else DeliveryState.DELIVERED,
                attempts=0 if live else 1,
                next_attempt_at=now - timedelta(seconds=rng.uniform(5, 190)),
                created_at=now - timedelta(minutes=4),
                finished_at=None if live else now - timedelta(seconds=rng.uniform(1, 230)),
            )
        )
    reply = _message("", 0.2, 1)
    reply.lane = Lane.PRIORITY
    reply.save(update_fields=["lane"])
    rows.append(
        Delivery(
            message=reply,
            inbox="https://slow.example/users/bob/inbox",
            host="slow.example",
            lane=Lane.PRIORITY,
            state=DeliveryState.SENDING,
            attempts=1,
        )
    )
    Delivery.objects.bulk_create(rows, batch_size=500)
    _failing_hosts(now, rng)
    return {state: Delivery.objects.filter(state=state).count() for state in DeliveryState.values}


def _failing_hosts(now: datetime, rng: random.Random) -> None:
    today = now.date()
    Host.objects.create(
        name="dead.example",
        failure_days=8,
        last_failure_day=today,
        first_failure_at=now - timedelta(days=8),
        unavailable_since=now,
        last_error="timeout: connect to dead.example timed out",
    )
    Host.objects.create(
        name="flaky.example",
        failure_days=1,
        last_failure_day=today,
        last_status=503,
        last_error="HTTP 503",
    )
    failing = Delivery.objects.filter(host__in=["dead.example", "flaky.example"]).order_by("id")
    history = []
    for n, delivery in enumerate(failing[:120]):
        dead = delivery.host == "dead.example"
        history.append(
            Attempt(
                delivery=delivery,
                number=1 + n % 5,
                host=delivery.host,
                at=now - timedelta(minutes=rng.uniform(0, 55)),  # inside the hour chart
                duration=5.0 if dead else rng.uniform(0.05, 0.4),
                status=None if dead else 503,
                scheme="draft-cavage",
                result="retry",
                error="connect to dead.example timed out after 5 s" if dead else "HTTP 503",
                wait=None if dead else 30.0,
            )
        )
        if not dead:  # then it succeeded: a late success, which is no failed attempt
            history.append(
                Attempt(
                    delivery=delivery, number=6, host=delivery.host, result="delivered",
                    at=now - timedelta(minutes=rng.uniform(0, 30)), duration=0.08, status=202,
                    scheme="draft-cavage",
                )
            )  # fmt: skip
    Attempt.objects.bulk_create(history)
    policy = BreakerPolicy(threshold=3, cool_off=600)
    store = configured_store()
    for _ in range(3):
        store.record("host:dead.example", policy, failed=True, admission=None)
    timings = [f"{HOSTS[i % 36]} {rng.uniform(0.01, 0.12):.4f}" for i in range(400)]
    timings += [f"slow.example {rng.uniform(1.5, 4.0):.4f}" for _ in range(20)]
    timings += [f"flaky.example {rng.uniform(0.1, 0.9):.4f}" for _ in range(30)]
    configured_metrics_store().add({}, timings)

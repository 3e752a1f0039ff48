"""How the outbox treats a destination: when to try again, and when to stop trying.

``backoff`` says when a failed delivery is tried next (``Retry-After`` and batch
deadlines included) or whether it is given up; ``failure_days`` is the rule by
which ``availability`` marks hosts unavailable and ``endpoint_health`` disables
webhook endpoints; ``pauses`` holds a host's deliveries while an operator says so.
"""

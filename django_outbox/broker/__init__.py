"""The Celery broker: publishing work, and reading what waits in its queues.

``publish`` is the only module that sends messages to the broker; ``backlog``
counts what waits in the lanes without taking it; ``lost`` tells deliveries
whose message a consumer took and never started.
"""

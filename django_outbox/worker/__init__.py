"""The worker side of delivery: what a Celery worker process runs.

``process`` keeps one process's engine, recorder, transport and caches, and
turns a task's delivery ids into jobs; ``engine`` runs jobs concurrently with
per-host caps (``host_lines``: each host's line); ``attempt`` makes one attempt
(host rate, breaker, signing, POST), asking ``pacing`` for its host's turn and the
breaker store through ``breaker_turns`` (one call per turn of the loop);
``recorder`` saves the outcomes in batches through the store's transitions.
"""

"""django_outbox's tests: ``unit/`` needs no server, ``integration/`` needs Redis and workers."""

"""Tests with real servers: Redis, PostgreSQL (or SQLite) and Celery worker processes."""

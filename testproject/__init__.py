"""A runnable Django project that uses django_outbox: demo, tests and benchmarks."""

from testproject.celery import app as celery_app

__all__ = ["celery_app"]

"""The Django app configuration: registers the models, the system checks and the Celery tasks."""

from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig


class OutboxConfig(AppConfig):
    """django_outbox's app config."""

    name = "django_outbox"
    verbose_name = "Outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def import_models(self) -> None:
        """Django finds ``models``; paid push keeps its tables in ``payments.models``,
        registered here whether or not ``OUTBOX_PAYMENTS`` is set, so that the
        migrations match the models either way."""
        super().import_models()
        import_module("django_outbox.payments.models")

    def ready(self) -> None:
        """Register the checks, the tasks with Celery even without autodiscovery, and
        the metrics with ``prometheus_client``'s default registry when it is installed."""
        from django_outbox import checks, tasks  # noqa: F401
        from django_outbox.metrics.prometheus import register_default

        register_default()

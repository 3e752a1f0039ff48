"""The demo app's config."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Config of the demo app."""

    name = "testproject.demo"
    label = "demo"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        if getattr(settings, "DEMO_LOG_SIGNALS", False):
            from testproject.demo import receivers  # noqa: F401 - connects the receivers

"""Settings, read lazily so that ``override_settings`` takes effect at once.

Every setting is a plain ``OUTBOX_*`` name in the project's settings module;
:data:`conf` exposes each as a typed property with its default, grouped by what
it governs in :mod:`django_outbox.setting_groups` (how they are read and
forgotten is :mod:`~django_outbox.setting_groups.reading`).  ``docs/configuration.md``
lists them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_outbox.setting_groups.host_health import HostHealthSettings
from django_outbox.setting_groups.reading import read_setting
from django_outbox.setting_groups.requests import RequestSettings
from django_outbox.setting_groups.retrying import RetrySettings
from django_outbox.setting_groups.sends import SendSettings
from django_outbox.setting_groups.sharing import SharingSettings
from django_outbox.setting_groups.workers import WorkerSettings

if TYPE_CHECKING:
    from django_outbox.payments.settings import PaymentSettings


class Settings(
    SendSettings,
    RetrySettings,
    WorkerSettings,
    RequestSettings,
    HostHealthSettings,
    SharingSettings,
):
    """The package's settings; see ``docs/configuration.md`` for each one."""

    @property
    def PAYMENTS(self) -> PaymentSettings | None:
        """``OUTBOX_PAYMENTS``: how to pay destinations that answer 402, or None (pay nothing)."""
        value = read_setting("OUTBOX_PAYMENTS", None)
        if value is None:
            return None
        from django_outbox.payments.settings import read_payments

        return read_payments(value)


conf = Settings()

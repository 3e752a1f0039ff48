"""The modules' old import paths, kept importable with a warning while users move.

The loose modules of the package's top level moved into sub-packages named after
their concern (``django_outbox.keys`` is now ``django_outbox.sending.keys``).
Importing an old path, or naming one in a setting, still works: it gives the
module at its new path and warns with a :class:`DeprecationWarning` that names
it.  The old paths go in a later release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

OLD_TO_NEW = {
    "django_outbox.admin_confirm": "django_outbox.admin.confirm",
    "django_outbox.admin_deliveries": "django_outbox.admin.deliveries",
    "django_outbox.admin_endpoints": "django_outbox.admin.endpoints",
    "django_outbox.admin_filters": "django_outbox.admin.filters",
    "django_outbox.admin_format": "django_outbox.admin.formatting",
    "django_outbox.admin_hosts": "django_outbox.admin.hosts",
    "django_outbox.admin_messages": "django_outbox.admin.messages",
    "django_outbox.admin_readonly": "django_outbox.admin.readonly",
    "django_outbox.api": "django_outbox.sending.outbox",
    "django_outbox.backlog": "django_outbox.broker.backlog",
    "django_outbox.backoff": "django_outbox.destinations.backoff",
    "django_outbox.batch": "django_outbox.sending.batch",
    "django_outbox.bulk": "django_outbox.upkeep.bulk",
    "django_outbox.charts": "django_outbox.admin.charts",
    "django_outbox.columns": "django_outbox.values.columns",
    "django_outbox.dispatch": "django_outbox.broker.publish",
    "django_outbox.endpoint_health": "django_outbox.destinations.endpoint_health",
    "django_outbox.endpoints": "django_outbox.sending.webhook_endpoints",
    "django_outbox.failure_days": "django_outbox.destinations.failure_days",
    "django_outbox.fanout": "django_outbox.sending.fanout",
    "django_outbox.hosts": "django_outbox.destinations.availability",
    "django_outbox.keys": "django_outbox.sending.keys",
    "django_outbox.lost": "django_outbox.broker.lost",
    "django_outbox.notify": "django_outbox.signals.sending",
    "django_outbox.operations": "django_outbox.upkeep.operations",
    "django_outbox.outcomes": "django_outbox.values.outcomes",
    "django_outbox.overview": "django_outbox.admin.overview",
    "django_outbox.passes": "django_outbox.upkeep.passes",
    "django_outbox.pauses": "django_outbox.upkeep.pauses",
    "django_outbox.portable": "django_outbox.sending.portable",
    "django_outbox.progress": "django_outbox.status.progress",
    "django_outbox.recipients": "django_outbox.sending.recipients",
    "django_outbox.recovery": "django_outbox.upkeep.recovery_pass",
    "django_outbox.safe_text": "django_outbox.values.safe_text",
    "django_outbox.sweeper": "django_outbox.upkeep.sweeper",
    "django_outbox.synchronization": "django_outbox.sending.synchronization",
    "django_outbox.validation": "django_outbox.sending.validation",
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of :data:`OLD_TO_NEW` and loads the module at its new one."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for an old path, none for every other name."""
        if fullname not in OLD_TO_NEW:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        """The module at the new path, after a warning that names it."""
        new = OLD_TO_NEW[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes in a later release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing: the module at the new path has run already."""


def install() -> None:
    """Adds the finder to :data:`sys.meta_path`, once."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())

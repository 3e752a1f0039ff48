"""Template filters of the outbox's admin pages: ``{% load outbox_admin %}``.

Each is a function of :mod:`django_outbox.admin.formatting`, so pages and lists write
times, durations and counts alike.
"""

from __future__ import annotations

from django import template

from django_outbox.admin import formatting
from django_outbox.status.text import seconds

register = template.Library()

register.filter("duration", seconds)
register.filter("local_time", formatting.local_time)
register.filter("relative", formatting.relative)
register.filter("moment", formatting.moment_with_age)
register.filter("count", formatting.count)
register.filter("msat", formatting.msat)

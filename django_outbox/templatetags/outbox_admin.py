"""Template filters of the outbox's admin pages: ``{% load outbox_admin %}``.

Each is a function of :mod:`django_outbox.admin_format`, so pages and lists write
times, durations and counts alike.
"""

from __future__ import annotations

from django import template

from django_outbox import admin_format
from django_outbox.status.text import seconds

register = template.Library()

register.filter("duration", seconds)
register.filter("local_time", admin_format.local_time)
register.filter("relative", admin_format.relative)
register.filter("moment", admin_format.moment_with_age)
register.filter("count", admin_format.count)
register.filter("msat", admin_format.msat)

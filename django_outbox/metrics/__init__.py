"""Metrics: how Prometheus reads what the workers count and what the database holds.

A scrape reads the workers' counters (:mod:`django_outbox.counters`, shared
through Redis) and a cached snapshot of the database (:mod:`~django_outbox.status`),
and the gauges of the active extensions; only the exposition needs
``prometheus-client`` (``django-outbox[metrics]``), imported in
:mod:`~django_outbox.metrics.prometheus` alone.  See ``docs/operations.md``.
"""

"""Metrics: what the workers count, where they keep it, and how Prometheus reads it.

Workers add up what a batch of outcomes did (:mod:`~django_outbox.metrics.recording`)
in process memory and write the sums every second to a store shared by every
worker process on every machine (:mod:`~django_outbox.metrics.shared_counters`: a Redis
hash, or this process's memory without Redis).  A scrape reads that store and a
cached snapshot of the database (:mod:`~django_outbox.status`); only the
exposition needs ``prometheus-client`` (``django-outbox[metrics]``), imported in
:mod:`~django_outbox.metrics.registry` alone.  See ``docs/operations.md``.
"""

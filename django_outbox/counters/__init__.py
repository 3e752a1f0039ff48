"""What the workers count, and where they keep it for every process to read.

Workers add up what a batch of outcomes did (:mod:`~django_outbox.counters.recording`,
with the names and buckets of :mod:`~django_outbox.counters.tally`) in process
memory and write the sums every second to a store shared by every worker process
on every machine (:mod:`~django_outbox.counters.shared`: a Redis hash, or this
process's memory without Redis).  :mod:`django_outbox.metrics` exposes them to
Prometheus; :mod:`django_outbox.status` reads them for ``outbox status`` and the admin.
"""

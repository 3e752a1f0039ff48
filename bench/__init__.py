"""Benchmarks of django_outbox: ``python bench/run.py [--quick] [--only NAME]``.

See ``docs/benchmarks.md`` for what each scenario measures and the latest figures.
"""

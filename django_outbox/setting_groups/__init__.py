"""The package's settings in groups, one class each, which :class:`django_outbox.conf.Settings`
brings together: ``sends`` (resolvers, limits, lanes, fan-out), ``retrying``,
``workers`` (claims, heartbeats, sweeps, concurrency), ``requests`` (networks,
timeouts, sizes), ``host_health`` (breakers, unavailable hosts, disabled
endpoints) and ``sharing`` (the caches workers share).  ``reading`` reads a
setting lazily and forgets it when ``override_settings`` changes it.
"""

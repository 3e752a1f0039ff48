"""Upkeep: the periodic passes, and the operator's actions on many deliveries.

``sweeper`` keeps the database and the broker in step (the ``sweep`` task);
``recovery_pass`` is what a leading worker process does every heartbeat; both
run their steps through ``passes``.  ``operations`` combines a change of state,
its signals and its publish; ``bulk`` applies requeue and give-up to a selection
of any size, for the command line and the admin.
"""

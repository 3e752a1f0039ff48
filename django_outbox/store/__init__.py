"""The database side of delivery: rows read for sending, and every change of state.

Nothing outside this package writes ``Delivery.state``: ``transitions`` makes
every change but two and its docstring carries the state diagram; ``give_ups``
fails live deliveries (with the durable mark of their ``delivery_failed``
signal) and ``reclaim`` takes back those of lost workers.  ``heartbeats`` keeps
the worker processes' heartbeat rows; ``pruning`` deletes finished rows past the
retention period, in batches; ``holds`` brings deliveries held for their host back
early once the host answers well, and ``parked`` makes deliveries parked for a host
due at once when what they waited for came sooner (the host resumed, an extension's
wait ended).  ``claimed`` holds what a claim hands the
worker, ``bulk_insert`` and ``grouped_updates`` build the statements that write
many rows at once.
"""

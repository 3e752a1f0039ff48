"""The database side of delivery: rows read for sending, and every change of state.

``transitions`` is the one module that writes ``Delivery.state``; its
docstring carries the state diagram.  ``claimed`` holds what a claim hands the
worker, ``bulk_insert`` and ``grouped_updates`` build the statements that write
many rows at once.
"""

"""Sending: the public entry points, down to the rows they write and the publish.

``outbox`` holds :data:`outbox` and its methods; ``validation`` and
``webhook_endpoints`` check what they are given before anything is written;
``batch`` is what the deliveries of one send share; ``recipients`` turns
recipients into inboxes (shared inboxes first) and ``portable`` FEP-ef61 inboxes
into gateways; ``fanout`` writes the delivery rows, in the caller's transaction
or, for a large send, in slices on a worker; ``keys`` reads the senders' keys;
``synchronization`` writes FEP-8fcf's followers digest.
"""

"""Template tags of the outbox admin (``outbox_admin``)."""

"""Unit tests of ``django_outbox.worker``."""

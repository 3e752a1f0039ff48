"""Unit tests of ``django_outbox.values``."""

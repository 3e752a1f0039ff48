"""Unit tests of ``django_outbox.upkeep``."""

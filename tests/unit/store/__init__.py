"""Unit tests of ``django_outbox.store``."""

"""Unit tests of ``django_outbox.testing``."""

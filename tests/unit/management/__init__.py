"""Unit tests of ``django_outbox.management``."""

"""Unit tests of ``django_outbox.destinations``."""

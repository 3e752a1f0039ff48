"""Unit tests of ``django_outbox.transport``."""

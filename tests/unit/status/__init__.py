"""Unit tests of ``django_outbox.status``."""

"""Unit tests of ``django_outbox.admin``."""

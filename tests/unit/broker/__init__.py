"""Unit tests of ``django_outbox.broker``."""

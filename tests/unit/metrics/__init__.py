"""Unit tests of ``django_outbox.metrics``."""

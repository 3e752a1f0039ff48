"""Unit tests of ``django_outbox.signing``."""

"""Unit tests of ``django_outbox.sending``."""

"""Unit tests of ``django_outbox.breakers``."""

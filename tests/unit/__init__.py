"""Tests that need neither Redis nor PostgreSQL: they run on SQLite, or with no database."""

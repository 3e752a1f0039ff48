"""The models and the shipped migrations agree."""

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_models_match_migrations() -> None:
    out = StringIO()
    call_command("makemigrations", "django_outbox", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()

"""The modules' old import paths still import, with a warning that names the new one."""

from __future__ import annotations

import importlib
import sys

import pytest

from django_outbox.moved import OLD_TO_NEW
from django_outbox.sending import keys


def test_an_old_path_gives_the_module_at_its_new_one_and_warns() -> None:
    sys.modules.pop("django_outbox.keys", None)
    with pytest.warns(
        DeprecationWarning, match="django_outbox.keys moved to django_outbox.sending.keys"
    ):
        old = importlib.import_module("django_outbox.keys")
    assert old is keys
    assert old.SenderKey is keys.SenderKey


def test_a_setting_may_still_name_an_old_path() -> None:
    from django.utils.module_loading import import_string

    sys.modules.pop("django_outbox.hosts", None)
    with pytest.warns(DeprecationWarning, match="django_outbox.hosts moved"):
        predicate = import_string("django_outbox.hosts.skip_unless_follow")
    assert predicate("https://a.example/inbox", "Follow") is False


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_every_new_path_exists_and_no_old_one_is_a_file(old: str) -> None:
    assert importlib.util.find_spec(OLD_TO_NEW[old]) is not None
    assert (
        importlib.machinery.PathFinder.find_spec(old, sys.modules["django_outbox"].__path__) is None
    )


def test_a_name_that_never_existed_is_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("django_outbox.no_such_module")


def test_a_signal_of_paid_push_is_still_found_where_it_was_declared() -> None:
    import django_outbox.signals as signals
    from django_outbox.payments.signals import payment_made

    with pytest.warns(DeprecationWarning, match="moved to django_outbox.payments.signals"):
        assert signals.payment_made is payment_made
    with pytest.raises(AttributeError):
        signals.no_such_signal  # noqa: B018

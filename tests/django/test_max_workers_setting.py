"""``MUTEXCRON["MAX_WORKERS"]``: the app's scheduler's worker threads (fires at once, and so the database
connections it may hold), checked and given to the scheduler (issue 11)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from mutexcron_django import runtime
from mutexcron_django.conf import get_settings


def test_the_default_is_ten_as_the_schedulers() -> None:
    with override_settings(MUTEXCRON={}):
        assert get_settings().max_workers == 10


@pytest.mark.parametrize("value", [0, -1, 1001, 2.5, "4", None, True], ids=repr)
def test_a_bad_value_names_the_setting_and_the_value(value: object) -> None:
    with override_settings(MUTEXCRON={"MAX_WORKERS": value}), pytest.raises(ImproperlyConfigured) as raised:
        get_settings()

    assert "MUTEXCRON['MAX_WORKERS']" in str(raised.value) and repr(value) in str(raised.value)


def test_the_apps_scheduler_gets_it() -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": "memory://", "MAX_WORKERS": 3}):
        scheduler = runtime.build_scheduler()
    try:
        assert scheduler.max_workers == 3
    finally:
        scheduler.shutdown()

"""``MUTEXCRON["SYNC_INTERVAL"]``: a timedelta or seconds, checked, and given to the app's scheduler (issue 9)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from mutexcron_django import runtime
from mutexcron_django.conf import get_settings


def test_the_default_is_five_seconds() -> None:
    with override_settings(MUTEXCRON={}):
        assert get_settings().sync_interval == timedelta(seconds=5)


@pytest.mark.parametrize(("value", "expected"), [(timedelta(seconds=2), timedelta(seconds=2)),
                                                 (30, timedelta(seconds=30)), (0.5, timedelta(milliseconds=500))])
def test_a_timedelta_or_seconds(value: object, expected: timedelta) -> None:
    with override_settings(MUTEXCRON={"SYNC_INTERVAL": value}):
        assert get_settings().sync_interval == expected


@pytest.mark.parametrize("value", [0, -1, timedelta(0), "5s", None, True, float("nan"), timedelta(days=400)],
                         ids=repr)
def test_a_bad_value_names_the_setting_and_the_value(value: object) -> None:
    with override_settings(MUTEXCRON={"SYNC_INTERVAL": value}), pytest.raises(ImproperlyConfigured) as raised:
        get_settings()

    assert "MUTEXCRON['SYNC_INTERVAL']" in str(raised.value)


def test_the_apps_scheduler_gets_it() -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": "memory://", "SYNC_INTERVAL": 7}):
        scheduler = runtime.build_scheduler()
    try:
        assert scheduler.sync_interval == timedelta(seconds=7)
    finally:
        scheduler.shutdown()

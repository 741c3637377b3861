"""The public helpers for backend authors: ``mutexcron.backend_helpers`` and ``mutexcron.urls.seconds_option``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

import mutexcron.backend_helpers
from mutexcron import StoreConfigError, _common, _options, _signals
from mutexcron.backend_helpers import as_utc
from mutexcron.tasks.records.base import DEFAULT_RETENTION, retention_option
from mutexcron.urls import seconds_option

URL = "redis://:s3cret@127.0.0.1:6379/0?retention=x"


def test_the_backend_helpers_are_the_private_modules_own() -> None:
    """One implementation: the public names are the very objects the built-in backends use."""
    for name in mutexcron.backend_helpers.__all__:
        source = next(m for m in (_common, _options, _signals) if hasattr(m, name))
        assert getattr(mutexcron.backend_helpers, name) is getattr(source, name), name


@pytest.mark.parametrize(("value", "expected"), [("1", timedelta(seconds=1)), ("0.25", timedelta(milliseconds=250)),
                                                 ("3600", timedelta(hours=1)), ("1e3", timedelta(seconds=1000))])
def test_a_seconds_option_is_a_positive_timedelta(value: str, expected: timedelta) -> None:
    assert seconds_option(URL, "max_sleep", value) == expected


@pytest.mark.parametrize("value", ["", "soon", "0", "-1", "nan", "inf", "-inf", "1e300", "0x10", "1e-9"])
def test_a_bad_seconds_option_names_the_option_and_the_masked_url(value: str) -> None:
    with pytest.raises(StoreConfigError) as raised:
        seconds_option(URL, "max_sleep", value, what="task backend")
    message = str(raised.value)
    assert f"max_sleep={value!r} must be a positive number of seconds" in message
    assert "task backend URL 'redis://***@127.0.0.1:6379/0?retention=x'" in message
    assert "s3cret" not in message


def test_a_record_stores_retention_option_follows_the_same_policy() -> None:
    assert retention_option(URL, {}) == DEFAULT_RETENTION
    assert retention_option(URL, {"retention": "60"}) == timedelta(seconds=60)
    for bad in ("never", "0", "-5", "inf"):
        with pytest.raises(StoreConfigError, match=f"cancel store URL .*: retention='{bad}' must be a positive"):
            retention_option(URL, {"retention": bad})


def test_as_utc_takes_naive_times_as_utc_and_converts_aware_ones() -> None:
    naive = datetime(2030, 1, 2, 3, 4, 5)
    assert as_utc(naive) == naive.replace(tzinfo=UTC) and as_utc(naive).tzinfo is UTC
    plus_two = datetime(2030, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert as_utc(plus_two) == plus_two and as_utc(plus_two).tzinfo is UTC and as_utc(plus_two).hour == 3

"""A job's run limits as declared: ``timeout`` and ``start_deadline`` are checked at declaration time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from mutexcron import JobDefinitionError, Registry, mutex_cron


@pytest.mark.parametrize("field", ["timeout", "start_deadline"])
@pytest.mark.parametrize("value", [0, -1, timedelta(0), timedelta(seconds=-5), float("inf"), float("nan"), "10",
                                   True, 10 ** 12])
def test_a_run_limit_that_is_not_a_positive_finite_duration_names_the_job_the_field_and_the_value(
        field: str, value: object) -> None:
    with pytest.raises(JobDefinitionError) as raised:
        mutex_cron("* * * * *", name="limited", registry=Registry(), **{field: value})(lambda: None)
    message = str(raised.value)
    assert "'limited'" in message and field in message and repr(value)[:20] in message


@pytest.mark.parametrize("field", ["timeout", "start_deadline"])
def test_a_run_limit_is_a_timedelta_or_seconds_and_none_by_default(field: str) -> None:
    registry = Registry()
    mutex_cron("* * * * *", name="seconds", registry=registry, **{field: 2.5})(lambda: None)
    mutex_cron("* * * * *", name="delta", registry=registry, **{field: timedelta(minutes=1)})(lambda: None)
    mutex_cron("* * * * *", name="none", registry=registry)(lambda: None)
    assert getattr(registry.get("seconds"), field) == timedelta(seconds=2.5)
    assert getattr(registry.get("delta"), field) == timedelta(minutes=1)
    assert getattr(registry.get("none"), field) is None

"""Bad input to every public entry point raises only its documented error, naming the job, field or value.

``mutex_cron`` options: JobDefinitionError (a bad spec: CronSpecError). ``Scheduler`` options:
SchedulerConfigError. ``schedule()`` arguments: PayloadError. Store and task queue URLs: StoreConfigError.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutexcron import CronSpecError, JobDefinitionError, Registry, Scheduler, SchedulerConfigError, mutex_cron
from mutexcron.cron import parse_cron
from mutexcron.errors import StoreConfigError
from mutexcron.stores import store_from_url
from mutexcron.tasks import TaskQueue
from mutexcron.tasks.model import PayloadError

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Durations no option takes: not finite, negative, beyond a year, or not a duration at all.
bad_durations = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e300, 10**30, timedelta.max, timedelta.min, True]),
    st.floats(max_value=-1e-3, allow_nan=False),
    st.integers(min_value=366 * 86400),
    st.timedeltas(min_value=timedelta(days=366)),
    st.timedeltas(max_value=timedelta(microseconds=-1)),
    st.text(max_size=5), st.none(), st.lists(st.integers(), max_size=2),
)
# Anything a person might pass where a zone name goes.
zone_names = st.one_of(st.text(max_size=30), st.text(min_size=250, max_size=400), st.integers(), st.none())


def declare(**options: Any) -> None:
    mutex_cron(options.pop("spec", "* * * * *"), name="tests.bad.job", registry=Registry(), **options)(lambda: None)


@FUZZ
@given(field=st.sampled_from(["lease", "hold_at_least", "catch_up_window", "jitter"]), value=bad_durations)
def test_a_bad_lease_or_hold_is_a_job_definition_error_naming_job_and_field(field: str, value: object) -> None:
    with pytest.raises(JobDefinitionError) as raised:
        declare(**{field: value})
    assert "tests.bad.job" in str(raised.value) and field in str(raised.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, 1e20, timedelta(days=10_000)])
def test_a_lease_that_timedelta_cannot_hold_or_a_store_cannot_date_is_a_job_definition_error(value: object) -> None:
    with pytest.raises(JobDefinitionError, match=r"'tests.bad.job': lease"):
        declare(lease=value)


@FUZZ
@given(value=zone_names)
def test_any_job_timezone_is_accepted_or_a_job_definition_error_naming_the_job(value: object) -> None:
    try:
        declare(timezone=value)
    except JobDefinitionError as error:
        assert "tests.bad.job" in str(error)


@FUZZ
@given(spec=st.one_of(st.text(max_size=40), st.builds(" ".join, st.lists(st.text(max_size=8), min_size=5,
                                                                            max_size=6))))
def test_any_cron_text_parses_or_is_a_cron_spec_error_naming_the_job(spec: str) -> None:
    try:
        parse_cron(spec, job_name="tests.bad.job")
    except CronSpecError as error:
        assert "tests.bad.job" in str(error)


@FUZZ
@given(digits=st.integers(min_value=4301, max_value=6000), field=st.integers(min_value=0, max_value=4),
       form=st.sampled_from(["{}", "*/{}", "1-{}", "{}-2"]))
def test_a_cron_number_of_thousands_of_digits_is_a_cron_spec_error(digits: int, field: int, form: str) -> None:
    parts = ["*"] * 5
    parts[field] = form.format("7" * digits)
    with pytest.raises(CronSpecError, match="digits"):
        parse_cron(" ".join(parts), job_name="tests.bad.job")


SCHEDULER_DURATIONS = ["misfire_grace_time", "shutdown_timeout", "busy_grace", "sync_interval"]


@FUZZ
@given(option=st.sampled_from([*SCHEDULER_DURATIONS, "clock_skew"]), value=bad_durations)
def test_a_bad_scheduler_duration_is_a_scheduler_config_error_naming_the_option(option: str, value: object) -> None:
    if option == "clock_skew" and isinstance(value, timedelta) and abs(value) <= timedelta(days=365):
        return  # a clock may be early as well as late
    with pytest.raises(SchedulerConfigError, match=option):
        Scheduler("memory://", **{option: value})


@FUZZ
@given(value=st.one_of(st.integers(max_value=0), st.integers(min_value=1001), st.floats(), st.text(), st.booleans()))
def test_a_bad_worker_count_is_a_scheduler_config_error_naming_the_option(value: object) -> None:
    with pytest.raises(SchedulerConfigError, match="max_workers"):
        Scheduler("memory://", max_workers=value)  # type: ignore[arg-type]


@FUZZ
@given(value=zone_names)
def test_any_scheduler_timezone_is_accepted_or_a_scheduler_config_error(value: object) -> None:
    try:
        Scheduler("memory://", timezone=value)  # type: ignore[arg-type]
    except SchedulerConfigError as error:
        assert "Scheduler timezone" in str(error)


@pytest.mark.parametrize("value", ["never", "", None, "ALL", 1, True])
def test_a_bad_catch_up_policy_is_a_job_definition_error_naming_job_and_value(value: object) -> None:
    with pytest.raises(JobDefinitionError, match=r"'tests.bad.job': catch_up must be one of"):
        declare(catch_up=value)


def test_a_zero_catch_up_window_or_sync_interval_is_refused() -> None:
    with pytest.raises(JobDefinitionError, match="catch_up_window"):
        declare(catch_up_window=timedelta(0))
    with pytest.raises(SchedulerConfigError, match="sync_interval"):
        Scheduler("memory://", sync_interval=timedelta(0))


@FUZZ
@given(spec=st.one_of(st.text(max_size=40), st.from_regex(r"[0-9*/,\- ]{1,30}", fullmatch=True)), zone=zone_names)
def test_any_schedule_override_is_stored_or_a_cron_spec_error_with_nothing_written(spec: str, zone: object) -> None:
    registry = Registry()
    mutex_cron("* * * * *", name="tests.bad.job", registry=registry)(lambda: None)
    scheduler = Scheduler("memory://", registry=registry)
    try:
        state = scheduler.set_schedule("tests.bad.job", spec, timezone=zone)  # type: ignore[arg-type]
    except CronSpecError as error:
        assert "tests.bad.job" in str(error)
        written = scheduler.store.lock("tests.bad.job")
        assert written is None or written.schedule_version == 0
    else:
        assert state.schedule == spec.strip() and state.schedule_version == 1


@pytest.mark.parametrize(("option", "value"), [
    ("registry", "default"), ("instance_id", ""), ("instance_id", 42), ("fire_context", "nullcontext"),
])
def test_other_bad_scheduler_options_are_scheduler_config_errors_naming_them(option: str, value: object) -> None:
    with pytest.raises(SchedulerConfigError, match=option):
        Scheduler("memory://", **{option: value})


@pytest.fixture
def queue(redis_server_url: str, redis_prefix: str) -> Iterator[TaskQueue]:
    with TaskQueue(f"{redis_server_url}?prefix={redis_prefix}") as queue:
        yield queue


def test_run_at_in_year_one_east_of_utc_is_a_payload_error_naming_it(queue: TaskQueue) -> None:
    with pytest.raises(PayloadError, match="run_at="):
        queue.schedule("bad-input", run_at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))))


def test_a_delay_past_the_year_9999_is_a_payload_error_naming_it(queue: TaskQueue) -> None:
    with pytest.raises(PayloadError, match="delay="):
        queue.schedule("bad-input", delay=timedelta(days=3_000_000))


@pytest.mark.parametrize("delay", [math.nan, math.inf, 30])
def test_a_delay_that_is_not_a_timedelta_is_a_payload_error_naming_it(queue: TaskQueue, delay: float) -> None:
    with pytest.raises(PayloadError, match="delay must be a timedelta"):
        queue.schedule("bad-input", delay=delay)  # type: ignore[arg-type]


@FUZZ
@given(moment=st.datetimes(timezones=st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-23),
                                                                       max_value=timedelta(hours=23)))))
def test_any_aware_run_at_is_scheduled_or_a_payload_error(queue: TaskQueue, moment: datetime) -> None:
    try:
        task_id = queue.schedule("bad-input", run_at=moment)
    except PayloadError as error:
        assert "run_at=" in str(error)
    else:
        stored = queue.info(task_id).run_at  # type: ignore[union-attr]
        assert abs(stored - moment.astimezone(UTC)) < timedelta(milliseconds=1)  # stored to the millisecond


@FUZZ
@given(entry=st.one_of(st.tuples(), st.tuples(st.just("bad-input")), st.text(max_size=3), st.integers(),
                       st.tuples(st.just("bad-input"), st.none(), st.integers())))
def test_a_malformed_schedule_many_entry_is_a_payload_error(queue: TaskQueue, entry: object) -> None:
    with pytest.raises(PayloadError):
        queue.schedule_many([entry])  # type: ignore[list-item]


# Random text after each scheme (no mongodb+srv: its host is looked up in DNS at once), and none.
store_urls = st.builds(str.__add__, st.sampled_from(["", "redis://", "rediss://", "unix://", "mongodb://", "memory://",
                                                     "amqp://", "django://", "x://"]), st.text(max_size=40))


@FUZZ
@given(url=st.one_of(store_urls, st.integers(), st.none(), st.binary(max_size=10)))
def test_any_store_url_builds_a_store_or_is_a_store_config_error(url: object) -> None:
    try:
        store_from_url(url).close()  # type: ignore[arg-type]
    except StoreConfigError as error:
        assert str(error)


@FUZZ
@given(url=st.one_of(store_urls, st.integers(), st.none()))
def test_any_task_queue_url_builds_a_queue_or_is_a_store_config_error(url: object) -> None:
    try:
        TaskQueue(url).backend.close()  # type: ignore[arg-type]
    except StoreConfigError as error:
        assert str(error)

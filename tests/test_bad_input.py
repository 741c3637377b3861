"""Bad input to every public entry point raises only its documented error, naming the job, field or value.

``mutex_cron`` options: JobDefinitionError (a bad spec: CronSpecError). ``Scheduler`` options:
SchedulerConfigError. ``@task_handler`` options: TaskHandlerError (a bad task type: InvalidTaskType).
``schedule()`` arguments: PayloadError (a bad task type: InvalidTaskType). Store, task queue and cancel store
URLs: StoreConfigError, quoting the URL masked (or its scheme), never its password.
"""

from __future__ import annotations

import json
import math
import os
import string
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mutexcron import CronSpecError, JobDefinitionError, Registry, Scheduler, SchedulerConfigError, mutex_cron
from mutexcron.cron import parse_cron
from mutexcron.errors import StoreConfigError
from mutexcron.stores import store_from_url
from mutexcron.tasks import HandlerRegistry, InvalidTaskType, TaskHandlerError, TaskQueue, task_handler
from mutexcron.tasks.handlers import Handler
from mutexcron.tasks.model import PayloadError
from mutexcron.urls import mask_url, url_scheme
from tests.support.leaks import SecretURL, exception_texts, secret_urls

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


@FUZZ
@given(value=st.one_of(st.text(max_size=12), st.sampled_from(["SKIP", "Wait", " raise", "skip\n", ""]), st.none(),
                       st.integers(), st.booleans(), st.floats(), st.lists(st.just("skip"), max_size=2))
       .filter(lambda value: value not in ("skip", "wait", "raise")))
def test_a_bad_busy_policy_is_a_job_definition_error_naming_job_field_and_value(value: object) -> None:
    with pytest.raises(JobDefinitionError) as raised:
        declare(on_busy=value)
    message = str(raised.value)
    assert "'tests.bad.job'" in message and "on_busy" in message and repr(value) in message


def _is_documented_job_name(name: str) -> bool:
    """README: letters (any script), digits and ``. _ - : @ / < > +``, at most 200 characters (starting with a
    letter, digit or _)."""
    return 0 < len(name) <= 200 and (name[0].isalnum() or name[0] == "_") and all(
        ch.isalnum() or ch in "._-:@/<>+" for ch in name)


@FUZZ
@given(name=st.one_of(st.text(max_size=30), st.text(min_size=195, max_size=260),
                      st.from_regex(r"\w[\w.:@/<>+-]{0,40}", fullmatch=True)))
def test_a_job_name_is_declared_if_documented_else_a_job_definition_error_quoting_it(name: str) -> None:
    registry = Registry()
    try:
        mutex_cron("* * * * *", name=name, registry=registry)(lambda: None)
    except JobDefinitionError as error:
        assert not _is_documented_job_name(name)
        assert "job name" in str(error) and (not name or repr(name[:60]) in str(error))
    else:
        assert _is_documented_job_name(name) and registry.names() == [name]


@pytest.mark.parametrize("name", [42, 3.5, b"tests.job", ["tests.job"]])
def test_a_job_name_that_is_not_a_string_is_a_job_definition_error_naming_its_type(name: object) -> None:
    with pytest.raises(JobDefinitionError, match=f"job name must be a string, not {type(name).__name__}"):
        mutex_cron("* * * * *", name=name, registry=Registry())(lambda: None)  # type: ignore[arg-type]


# -- @task_handler -----------------------------------------------------------------------------------------


def _is_documented_task_type(task_type: object) -> bool:
    """1-100 characters of ASCII letters, digits and ``_ . : -``, starting with a letter or digit."""
    allowed = set(string.ascii_letters + string.digits + "_.:-")
    return (isinstance(task_type, str) and 0 < len(task_type) <= 100 and task_type[0].isascii()
            and task_type[0].isalnum() and set(task_type) <= allowed)


task_types = st.one_of(st.text(max_size=12), st.text(min_size=98, max_size=104, alphabet="ab.-"),
                       st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,20}", fullmatch=True),
                       st.integers(), st.none(), st.binary(max_size=4))


@FUZZ
@given(task_type=task_types)
def test_a_task_handler_type_is_registered_if_valid_else_an_invalid_task_type_quoting_it(task_type: object) -> None:
    handlers = HandlerRegistry()
    try:
        task_handler(task_type, registry=handlers)(lambda payload: None)  # type: ignore[arg-type]
    except InvalidTaskType as error:
        assert not _is_documented_task_type(task_type)
        assert f"task type {task_type!r} is invalid" in str(error)
    else:
        assert _is_documented_task_type(task_type) and handlers.types() == [task_type]


bad_attempts = st.one_of(st.integers(max_value=0), st.booleans(), st.floats(), st.text(max_size=3), st.none(),
                         st.just(Decimal(3)))
# Durations a handler cannot take: not a timedelta, not above 0, or over a year (retries and claims would end
# past what datetimes and the stores hold).
bad_handler_durations = st.one_of(
    st.timedeltas(max_value=timedelta(0)), st.timedeltas(min_value=timedelta(days=366)),
    st.sampled_from([timedelta.max, 30, 1.5, math.inf, "1s", None, True]),
)


@FUZZ
@given(value=bad_attempts)
def test_a_bad_max_attempts_is_a_task_handler_error_naming_type_field_and_value(value: object) -> None:
    with pytest.raises(TaskHandlerError) as raised:
        task_handler("opts.task", max_attempts=value, registry=HandlerRegistry())  # type: ignore[arg-type]
    message = str(raised.value)
    assert "'opts.task'" in message and "max_attempts" in message and repr(value) in message


@FUZZ
@given(field=st.sampled_from(["backoff", "max_backoff", "visibility_timeout"]), value=bad_handler_durations)
def test_a_bad_handler_duration_is_a_task_handler_error_naming_type_field_and_value(field: str,
                                                                                   value: object) -> None:
    with pytest.raises(TaskHandlerError) as raised:
        task_handler("opts.task", registry=HandlerRegistry(), **{field: value})  # type: ignore[arg-type]
    message = str(raised.value)
    assert "'opts.task'" in message and field in message and repr(value)[:60] in message


@FUZZ
@given(backoff=st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=365)),
       max_backoff=st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=365)),
       attempt=st.one_of(st.integers(min_value=2, max_value=200), st.integers(min_value=200, max_value=10**30)))
def test_the_backoff_before_any_attempt_is_capped_never_an_overflow(backoff: timedelta, max_backoff: timedelta,
                                                                    attempt: int) -> None:
    """``max_attempts`` has no upper bound: the doubling backoff of attempt 100 must not overflow a timedelta."""
    handler = Handler("opts.task", lambda payload: None, max_attempts=attempt, backoff=backoff,
                      max_backoff=max_backoff)
    micro = timedelta(microseconds=1)
    doubled = (backoff // micro) << min(attempt - 2, 80)  # 2**80 µs is far more than any max_backoff
    assert handler.delay_before(attempt) == min(max_backoff, timedelta(microseconds=min(doubled, 10**18)))


@pytest.mark.parametrize(("spec", "jitter", "interval"), [
    ("* * * * *", timedelta(minutes=2), "0:01:00"),
    ("* * * * * *", 3, "0:00:01"),
    ("0 0,1 * * * *", timedelta(minutes=1), "0:01:00"),  # at the interval, and an irregular spec's closest ticks
    ("*/40 * * * * *", timedelta(seconds=25), "0:00:20"),  # :40 to the next minute's :00
    ("0 0 * * 5,6", timedelta(days=2), "1 day, 0:00:00"),
])
def test_a_jitter_not_below_the_shortest_interval_between_ticks_is_a_job_definition_error_naming_both(
        spec: str, jitter: timedelta | int, interval: str) -> None:
    registry = Registry()
    with pytest.raises(JobDefinitionError) as raised:
        mutex_cron(spec, name="tests.bad.job", registry=registry, jitter=jitter)(lambda: None)
    message = str(raised.value)
    shown = jitter if isinstance(jitter, timedelta) else timedelta(seconds=jitter)
    assert "'tests.bad.job'" in message and f"jitter {shown}" in message and interval in message
    assert "tests.bad.job" not in registry


def test_a_jitter_just_below_the_shortest_interval_between_ticks_is_accepted() -> None:
    declare(spec="0 0,1 * * * *", jitter=timedelta(seconds=59, milliseconds=999))
    declare(spec="0 0 * * 1,5", jitter=timedelta(days=3) - timedelta(milliseconds=1))


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
    """A producer of task types it has no handler for (require_handlers=False): these tests check the rest."""
    with TaskQueue(f"{redis_server_url}?prefix={redis_prefix}", require_handlers=False) as queue:
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
@given(task_type=task_types)
def test_a_scheduled_task_type_is_stored_if_valid_else_an_invalid_task_type_quoting_it(queue: TaskQueue,
                                                                                      task_type: object) -> None:
    try:
        task_id = queue.schedule(task_type, 1, delay=timedelta(days=1))  # type: ignore[arg-type]
    except InvalidTaskType as error:
        assert not _is_documented_task_type(task_type)
        assert f"task type {task_type!r} is invalid" in str(error)
    else:
        assert _is_documented_task_type(task_type)
        assert queue.info(task_id).task_type == task_type  # type: ignore[union-attr]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
# Values JSON cannot hold: not finite, naive or aware datetimes, bytes, sets, objects, non-string keys that
# JSON cannot turn into one, an integer of thousands of digits; alone or inside a JSON value.
not_json = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, b"bytes", {1, 2}, object(), datetime(2030, 1, 1),
                     datetime(2030, 1, 1, tzinfo=UTC), Decimal("1.5"), {(1, 2): "tuple key"}, 10**5000]),
    st.binary(min_size=1, max_size=4),
)
payloads_with_garbage = st.one_of(not_json, st.lists(not_json, min_size=1, max_size=2),
                                  st.dictionaries(st.text(max_size=3), not_json, min_size=1, max_size=2))


@FUZZ
@given(payload=json_values)
def test_any_json_payload_is_stored_as_given(queue: TaskQueue, payload: Any) -> None:
    task_id = queue.schedule("bad-input", payload, delay=timedelta(days=1))
    assert queue.info(task_id).payload == payload  # type: ignore[union-attr]


@FUZZ
@given(payload=payloads_with_garbage)
def test_a_payload_json_cannot_hold_is_a_payload_error_naming_the_type_and_field(queue: TaskQueue,
                                                                                payload: object) -> None:
    with pytest.raises(PayloadError) as raised:
        queue.schedule("bad-input", payload, delay=timedelta(days=1))
    assert str(raised.value).startswith("task 'bad-input': payload is not JSON-serialisable")


def test_a_payload_nested_too_deep_is_a_payload_error() -> None:
    payload: list[object] = []
    for _ in range(100_000):
        payload = [payload]
    with TaskQueue("redis://127.0.0.1:1/0", require_handlers=False) as queue, \
            pytest.raises(PayloadError, match="'deep': payload"):
        queue.schedule("deep", payload)  # refused before the backend is asked: nothing listens on port 1


@FUZZ
@given(entry=st.one_of(st.tuples(), st.tuples(st.just("bad-input")), st.text(max_size=3), st.integers(),
                       st.tuples(st.just("bad-input"), st.none(), st.integers())))
def test_a_malformed_schedule_many_entry_is_a_payload_error(queue: TaskQueue, entry: object) -> None:
    with pytest.raises(PayloadError):
        queue.schedule_many([entry])  # type: ignore[list-item]


# Random text after each scheme (no mongodb+srv: its host is looked up in DNS at once), and none.
store_urls = st.builds(str.__add__, st.sampled_from(["", "redis://", "rediss://", "unix://", "mongodb://", "memory://",
                                                     "amqp://", "django://", "x://"]), st.text(max_size=40))


def assert_quotes_the_url(error: StoreConfigError, url: object) -> None:
    """The message quotes the URL as given, masked (or at least its scheme); a value that is no string by its
    repr, bytes (which may hold a password) by type only."""
    message = str(error)
    assert message
    if isinstance(url, bytes):
        assert "a bytes value" in message, message
    elif not isinstance(url, str):
        assert repr(url) in message, message
    else:
        scheme = url_scheme(url)
        quoted = (mask_url(url), repr(mask_url(url))[1:-1])
        assert any(form in message for form in quoted) or (scheme is not None and f"{scheme}" in message), message


@FUZZ
@given(url=st.one_of(store_urls, st.integers(), st.none(), st.binary(max_size=10)))
def test_any_store_url_builds_a_store_or_is_a_store_config_error(url: object) -> None:
    try:
        store_from_url(url).close()  # type: ignore[arg-type]
    except StoreConfigError as error:
        assert_quotes_the_url(error, url)


@FUZZ
@given(url=st.one_of(store_urls, st.integers(), st.none()))
def test_any_task_queue_url_builds_a_queue_or_is_a_store_config_error(url: object) -> None:
    try:
        TaskQueue(url).backend.close()  # type: ignore[arg-type]
    except StoreConfigError as error:
        if "needs a cancel store" in str(error):  # a well-formed RabbitMQ URL: the cancel_store is what is missing
            assert isinstance(url, str) and url_scheme(url) == "amqp" and "cancel_store=" in str(error)
        else:
            assert_quotes_the_url(error, url)


# Each backend that takes a cancel store, and Redis, which refuses one. Nothing is connected to while building.
CANCEL_STORE_BACKENDS = ["amqp://guest:guest@127.0.0.1:1/", "redis://127.0.0.1:1/0"]


@FUZZ
@given(backend=st.sampled_from(CANCEL_STORE_BACKENDS),
       url=st.one_of(store_urls, st.integers(), st.booleans(), st.binary(max_size=10)))
def test_any_cancel_store_url_builds_a_queue_or_is_a_store_config_error_quoting_it(backend: str,
                                                                                  url: object) -> None:
    try:
        TaskQueue(backend, cancel_store=url).backend.close()  # type: ignore[arg-type]
    except StoreConfigError as error:
        assert_quotes_the_url(error, url)


@FUZZ
@given(backend=st.sampled_from(CANCEL_STORE_BACKENDS), secret=secret_urls)
def test_a_cancel_store_url_with_a_password_is_quoted_masked_never_with_it(backend: str, secret: SecretURL) -> None:
    try:
        TaskQueue(backend, cancel_store=secret.url).backend.close()
    except StoreConfigError as error:
        assert_quotes_the_url(error, secret.url)
        assert not [text for text in exception_texts(error) if secret.password in text]


# -- django:// outside a configured Django project -----------------------------------------------------------

_OUTSIDE_DJANGO = """
import json, sys
if sys.argv[1] == "configured-not-set-up":
    from django.conf import settings
    settings.configure(INSTALLED_APPS=["mutexcron_django"])  # but no django.setup(): the apps are not loaded
from mutexcron.stores import store_from_url
from mutexcron.tasks import TaskQueue
calls = {
    "store": lambda: store_from_url("django://"),
    "store with an alias": lambda: store_from_url("django://other"),
    "task queue": lambda: TaskQueue("django://"),
    "cancel store": lambda: TaskQueue("amqp://guest:guest@127.0.0.1:1/", cancel_store="django://"),
}
raised = {}
for name, call in calls.items():
    try:
        call()
        raised[name] = ["nothing", ""]
    except Exception as error:
        raised[name] = [f"{type(error).__module__}.{type(error).__qualname__}", str(error)]
print(json.dumps(raised))
"""


@pytest.mark.parametrize("django", ["no settings", "configured-not-set-up"])
def test_django_urls_outside_a_configured_django_are_a_store_config_error_that_says_what_it_needs(
    django: str,
) -> None:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", _OUTSIDE_DJANGO, django], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    raised = json.loads(done.stdout)
    assert set(raised) == {"store", "store with an alias", "task queue", "cancel store"}
    for entry_point, (error_type, message) in raised.items():
        assert error_type == "mutexcron.errors.StoreConfigError", (entry_point, error_type, message)
        assert "django:// needs Django and mutexcron_django installed and configured" in message, entry_point
        assert "INSTALLED_APPS" in message and "django.setup()" in message, entry_point

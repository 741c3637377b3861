"""Declaring jobs with @mutex_cron: every mistake is caught at declaration time, with a clear message."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from mutexcron import (
    CronSpecError,
    DuplicateJobError,
    JobContext,
    JobDefinitionError,
    Registry,
    UnknownJobError,
    default_registry,
    mutex_cron,
)


def test_decorator_returns_the_function_unchanged(registry: Registry) -> None:
    def report() -> str:
        return "ran without a lock"

    assert mutex_cron("0 6 * * *", registry=registry)(report) is report
    assert report() == "ran without a lock"


def test_name_defaults_to_module_and_qualname(registry: Registry) -> None:
    @mutex_cron("0 6 * * *", registry=registry)
    def digest() -> None: ...

    assert registry.names() == [f"{__name__}.test_name_defaults_to_module_and_qualname.<locals>.digest"]


def test_default_registry_is_used_when_none_is_given() -> None:
    @mutex_cron("0 6 * * *", name="tests.default_registry_job")
    def job() -> None: ...

    try:
        assert "tests.default_registry_job" in default_registry
    finally:
        default_registry.remove("tests.default_registry_job")


def test_declared_settings_are_kept(registry: Registry) -> None:
    @mutex_cron("0 0 6 * * *", name="digest", lease=timedelta(minutes=5), hold_at_least=30,
                timezone="Europe/Paris", on_busy="wait", registry=registry)
    def digest() -> None: ...

    job = registry.get("digest")
    assert job.spec.hours == (6,)
    assert job.lease == timedelta(minutes=5)
    assert job.hold_at_least == timedelta(seconds=30)
    assert str(job.timezone) == "Europe/Paris"
    assert job.on_busy == "wait"


def test_a_pytz_zone_is_kept_as_the_zoneinfo_of_its_name(registry: Registry) -> None:
    pytz = pytest.importorskip("pytz")
    mutex_cron("0 9 * * *", name="berlin", timezone=pytz.timezone("Europe/Berlin"), registry=registry)(lambda: None)

    assert registry.get("berlin").timezone == ZoneInfo("Europe/Berlin")


def test_duplicate_name_names_both_functions(registry: Registry) -> None:
    @mutex_cron("0 6 * * *", name="digest", registry=registry)
    def first() -> None: ...

    with pytest.raises(DuplicateJobError) as error:
        @mutex_cron("0 7 * * *", name="digest", registry=registry)
        def second() -> None: ...

    assert "first" in str(error.value) and "second" in str(error.value) and "'digest'" in str(error.value)


def test_redeclaring_the_same_function_replaces_it(registry: Registry) -> None:
    def job() -> None: ...

    mutex_cron("0 6 * * *", name="job", registry=registry)(job)
    mutex_cron("0 7 * * *", name="job", registry=registry)(job)  # a module imported twice
    assert registry.get("job").spec.hours == (7,)


def test_bad_spec_fails_at_declaration_naming_the_job(registry: Registry) -> None:
    with pytest.raises(CronSpecError, match=r"job 'nightly'.*'hour'.*'25'"):
        @mutex_cron("0 25 * * *", name="nightly", registry=registry)
        def nightly() -> None: ...


@pytest.mark.parametrize(
    "name",
    ["$where", "a$b", ".", "{slot}", "a}b", "two words", "tab\there", "line\nbreak", "", "x" * 1024, "quote'd"],
)
def test_hostile_job_names_are_rejected_with_a_clear_error(registry: Registry, name: str) -> None:
    with pytest.raises(JobDefinitionError, match="job name"):
        mutex_cron("0 6 * * *", name=name, registry=registry)(lambda: None)
    assert len(registry) == 0


@pytest.mark.parametrize("name", ["报告.日报", "app.module.<locals>.job", "a:b@c/d+e-f", "x" * 200])
def test_unusual_but_safe_job_names_are_accepted(registry: Registry, name: str) -> None:
    mutex_cron("0 6 * * *", name=name, registry=registry)(lambda: None)
    assert name in registry


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lease": timedelta(0)}, "lease must be > 0"),
        ({"lease": -5}, "lease must be > 0"),
        ({"lease": "10m"}, "lease must be a timedelta"),
        ({"hold_at_least": timedelta(seconds=-1)}, "hold_at_least must be >= 0"),
        ({"lease": 10, "hold_at_least": 11}, "must not exceed lease"),
        ({"on_busy": "queue"}, "on_busy must be one of"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_bad_options_name_the_job_and_the_value(registry: Registry, options: dict, message: str) -> None:
    with pytest.raises(JobDefinitionError, match=message) as error:
        mutex_cron("0 6 * * *", name="digest", registry=registry, **options)(lambda: None)
    assert "'digest'" in str(error.value)


def test_a_function_needing_two_arguments_is_rejected(registry: Registry) -> None:
    with pytest.raises(JobDefinitionError, match="requires ctx, extra"):
        @mutex_cron("0 6 * * *", name="digest", registry=registry)
        def digest(ctx: JobContext, extra: int) -> None: ...


def test_context_is_passed_only_to_functions_that_take_it(registry: Registry) -> None:
    @mutex_cron("0 6 * * *", name="with_ctx", registry=registry)
    def with_ctx(ctx: JobContext) -> None: ...

    @mutex_cron("0 6 * * *", name="without", registry=registry)
    def without() -> None: ...

    assert registry.get("with_ctx").takes_context
    assert not registry.get("without").takes_context


def test_unknown_job_error_lists_the_declared_jobs(registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="digest", registry=registry)(lambda: None)
    with pytest.raises(UnknownJobError, match=r"'nope'.*digest"):
        registry.get("nope")


# -- targets of run-time schedules ---------------------------------------------------------------------------


def make_sender(channel: str) -> Callable[[], str]:
    """A factory: each call makes another function with the same ``module.qualname``."""
    def send() -> str:
        return channel

    return send


def test_allowing_another_function_under_a_taken_target_name_raises_naming_the_name_and_both_places(
    registry: Registry,
) -> None:
    email, sms = make_sender("email"), make_sender("sms")
    registry.allow(email)

    with pytest.raises(DuplicateJobError) as error:
        registry.allow(sms)

    name = f"{__name__}.make_sender.<locals>.send"
    assert f"target name {name!r} is allowed twice" in str(error.value)
    assert str(error.value).count(f"{name} ({__file__}:") == 2
    assert registry.target(name) is email


def test_allowing_the_same_function_again_under_its_name_is_fine(registry: Registry) -> None:
    email = make_sender("email")
    registry.allow(email)
    registry.allow(email)

    assert list(registry.targets().values()) == [email]

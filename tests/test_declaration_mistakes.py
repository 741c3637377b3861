"""Declaration mistakes that must not fail silently: a decorator used without its parentheses is a TypeError showing
the right form, and a bad ``@mutex_cron`` while collecting (Django's discovery) is kept, hides none of the jobs
declared after it, and is logged as an ERROR by a starting scheduler."""

from __future__ import annotations

import logging

import pytest

from mutexcron import CronSpecError, DuplicateJobError, Registry, Scheduler, callable_target, mutex_cron
from mutexcron.declarations import collecting
from mutexcron.stores import MemoryLockStore
from mutexcron.tasks import HandlerRegistry, task_handler

# -- a decorator without its parentheses -----------------------------------------------------------------


def test_mutex_cron_without_parentheses_is_a_type_error_showing_the_right_form_and_naming_the_function() -> None:
    with pytest.raises(TypeError) as raised:
        @mutex_cron  # type: ignore[arg-type]
        def nightly_report() -> None: ...

    assert '@mutex_cron("0 * * * *")' in str(raised.value)
    assert f"{__name__}.test_" in str(raised.value) and ".<locals>.nightly_report (" in str(raised.value)


def test_callable_target_without_parentheses_is_a_type_error_showing_the_right_form_and_naming_the_function() -> None:
    with pytest.raises(TypeError) as raised:
        @callable_target  # type: ignore[arg-type]
        def send_report() -> None: ...

    assert "@callable_target()" in str(raised.value)
    assert "send_report" in str(raised.value)


def test_task_handler_without_parentheses_is_a_type_error_showing_the_right_form_and_naming_the_function() -> None:
    with pytest.raises(TypeError) as raised:
        @task_handler  # type: ignore[arg-type]
        def send_email(payload: object) -> None: ...

    assert '@task_handler("' in str(raised.value)
    assert "send_email" in str(raised.value)


def test_the_decorators_with_parentheses_still_register(registry: Registry) -> None:
    handlers = HandlerRegistry()

    @mutex_cron("0 * * * *", name="hourly", registry=registry)
    @callable_target("hourly-target", registry=registry)
    @task_handler("hourly.task", registry=handlers)
    def hourly(payload: object = None) -> None: ...

    assert registry.names() == ["hourly"]
    assert list(registry.targets()) == ["hourly-target"]
    assert handlers.types() == ["hourly.task"]


# -- a bad declaration while collecting ------------------------------------------------------------------


def declare_three(registry: Registry) -> None:
    """A valid job, a 7-field spec, a valid job: as in a module of jobs."""
    mutex_cron("@daily", name="before", registry=registry)(lambda: None)
    mutex_cron("0 0 6 * * * 2030", name="seven_fields", registry=registry)(lambda: None)
    mutex_cron("@hourly", name="after", registry=registry)(lambda: None)


def test_outside_collecting_a_bad_declaration_raises_at_once(registry: Registry) -> None:
    with pytest.raises(CronSpecError, match=r"'seven_fields'.*7 fields"):
        declare_three(registry)
    assert registry.names() == ["before"]


def test_while_collecting_a_bad_declaration_hides_none_of_the_jobs_after_it(registry: Registry) -> None:
    with collecting():
        declare_three(registry)

    assert registry.names() == ["after", "before"]


def test_while_collecting_a_bad_declaration_is_kept_with_the_job_its_place_and_its_error(registry: Registry) -> None:
    with collecting() as found:
        declare_three(registry)

    (problem,) = registry.problems()
    assert found == [problem]
    assert problem.job == "seven_fields"
    assert problem.location.startswith(f"{__name__}.declare_three.<locals>.<lambda> (")
    assert isinstance(problem.error, CronSpecError) and "7 fields" in str(problem.error)


def test_while_collecting_a_second_function_under_a_taken_name_is_kept_and_the_first_stays(registry: Registry) -> None:
    def first() -> None: ...

    def second() -> None: ...

    with collecting():
        mutex_cron("@daily", name="digest", registry=registry)(first)
        mutex_cron("@hourly", name="digest", registry=registry)(second)

    assert registry.get("digest").func is first
    (problem,) = registry.problems()
    assert isinstance(problem.error, DuplicateJobError) and ".second" in problem.location


def test_a_failed_declaration_collected_twice_is_kept_once(registry: Registry) -> None:
    for _ in range(2):  # a module imported again
        with collecting():
            mutex_cron("61 * * * *", name="bad", registry=registry)(print)

    assert len(registry.problems()) == 1


def test_removing_a_job_forgets_its_failed_declaration(registry: Registry) -> None:
    with collecting():
        declare_three(registry)

    registry.remove("seven_fields")
    assert registry.problems() == []


def test_a_starting_scheduler_logs_an_error_naming_each_job_that_will_not_run_and_why(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    with collecting():
        declare_three(registry)
        mutex_cron("@weekly", name="before", registry=registry)(print)  # a second function under a taken name

    scheduler = Scheduler(MemoryLockStore(), registry=registry)
    with caplog.at_level(logging.ERROR, logger="mutexcron.scheduler"):
        scheduler.start()
    scheduler.shutdown()

    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name == "mutexcron.scheduler"]
    assert len(errors) == 2
    seven, duplicate = sorted(errors, key=lambda message: "seven_fields" not in message)
    assert seven.startswith("job 'seven_fields' (") and "will not run" in seven and "has 7 fields" in seven
    assert duplicate.startswith("job 'before' (") and "will not run" in duplicate and "declared twice" in duplicate

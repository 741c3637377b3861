"""``manage.py mutexcron schedules add|remove|list`` on the SQL store and on Redis, the targets allowed in the
default registry as an app's cron.py would, and a ``django.tasks`` ``@task`` as a target (enqueued by the run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import django
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from mutexcron import Outcome, default_registry
from mutexcron_django import runtime
from tests.django.jobhelpers import Declarations

TARGET = "tests.django.send"
pytestmark = pytest.mark.django_db  # the SQL store's tables (the Redis runs need none)

if django.VERSION >= (6, 0):
    from django.tasks import task

    @task
    def rebuild_index(full: bool) -> None:
        """A django.tasks task (a module-level function, as Django requires) made a target below."""


@pytest.fixture
def sent() -> Iterator[list[dict[str, Any]]]:
    """TARGET allowed in the default registry for one test; what its runs were given."""
    calls: list[dict[str, Any]] = []
    default_registry.allow(lambda to, copies=1: calls.append({"to": to, "copies": copies}), TARGET)
    yield calls
    default_registry._targets.pop(TARGET, None)


@pytest.fixture(params=["sql", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[str]:
    url = "django://" if request.param == "sql" else request.getfixturevalue("redis_url")
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": url}):
        yield url


def mutexcron(*args: str) -> str:
    out = StringIO()
    call_command("mutexcron", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_a_schedule_added_by_the_command_runs_its_target(store: str, sent: list[dict[str, Any]]) -> None:
    output = mutexcron("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs",
                       '{"to": "ops", "copies": 2}', "--by", "alice")
    assert "'report-ops' calls 'tests.django.send'" in output
    scheduler = runtime.build_scheduler()
    try:
        scheduler._follow(scheduler.schedules()[0])
        assert scheduler.run_tick("report-ops", datetime(2030, 1, 2, 7, tzinfo=UTC)).outcome is Outcome.SUCCEEDED
    finally:
        scheduler.shutdown()
    assert sent == [{"to": "ops", "copies": 2}]


def test_schedules_list_and_remove(store: str, sent: list[dict[str, Any]]) -> None:
    mutexcron("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}')
    listed = json.loads(mutexcron("schedules", "list", "--json"))
    assert [(row["name"], row["target"], row["kwargs"]) for row in listed] == [("report-ops", TARGET, {"to": "ops"})]
    assert "removed run-time schedule 'report-ops'" in mutexcron("schedules", "remove", "report-ops")
    assert json.loads(mutexcron("schedules", "list", "--json")) == []


def test_list_shows_a_run_time_schedule_as_a_job(store: str, sent: list[dict[str, Any]]) -> None:
    mutexcron("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}')
    output = mutexcron("list")
    assert "report-ops (run-time)" in output and "Locks of no declared job" not in output


def test_a_name_of_a_declared_job_is_refused_naming_it(store: str, sent: list[dict[str, Any]],
                                                       declare: Declarations) -> None:
    declare("0 * * * *", name="tests.django.declared")
    with pytest.raises(CommandError, match=r"'tests.django.declared': the name is a job declared in code"):
        mutexcron("schedules", "add", "tests.django.declared", "0 7 * * *", "--target", TARGET,
                  "--kwargs", '{"to": "ops"}')


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks exists only in Django 6.0+")
def test_a_django_task_target_is_enqueued_by_the_run(store: str) -> None:
    from django.tasks import default_task_backend

    default_registry.allow(rebuild_index, "tests.django.rebuild")
    try:
        with override_settings(TASKS={"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}):
            mutexcron("schedules", "add", "rebuild", "0 3 * * *", "--target", "tests.django.rebuild", "--kwargs",
                      '{"full": true}')
            scheduler = runtime.build_scheduler()
            try:
                scheduler._follow(scheduler.schedules()[0])
                record = scheduler.run_tick("rebuild", datetime(2030, 1, 2, 3, tzinfo=UTC))
            finally:
                scheduler.shutdown()
            assert record.outcome is Outcome.SUCCEEDED
            results = default_task_backend.results  # type: ignore[attr-defined]
            enqueued = [(r.task.func.__name__, r.args, r.kwargs) for r in results]
            assert enqueued == [("rebuild_index", [], {"full": True})]
    finally:
        default_registry._targets.pop("tests.django.rebuild", None)


def test_a_run_time_schedule_is_no_orphan_lock_for_the_checks(store: str, sent: list[dict[str, Any]]) -> None:
    from mutexcron_django.checks import _orphans
    from mutexcron_django.conf import get_settings

    mutexcron("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}')
    built = get_settings().build_store()
    try:
        assert [w.obj for w in _orphans(built)] == []
    finally:
        built.close()


def test_trigger_runs_a_run_time_schedule_now(store: str, sent: list[dict[str, Any]]) -> None:
    mutexcron("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}')
    assert "job 'report-ops' succeeded" in mutexcron("trigger", "report-ops")
    assert sent == [{"to": "ops", "copies": 1}]

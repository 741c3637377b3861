"""``python -m mutexcron schedules add|remove|list`` as a real process against real Redis (its own key prefix): the
schedule it stores is the one a Scheduler on the store runs; bad definitions exit 1 with the field named."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Outcome, Registry, Scheduler
from mutexcron.stores import store_from_url
from tests.test_cli import APP, cli

TARGET = "tests.cli.send"


def test_a_schedule_added_by_the_command_line_runs_its_target_on_a_scheduler_of_the_store(redis_url: str) -> None:
    done = cli("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}',
               "--timezone", "Europe/Paris", "--by", "alice", "--store", redis_url, "--app", APP)
    assert (done.returncode, done.stderr) == (0, "")
    assert "'report-ops' calls 'tests.cli.send' on '0 7 * * *'" in done.stdout
    sent: list[str] = []
    registry = Registry()
    registry.allow(lambda to, copies=1: sent.append(to), TARGET)
    scheduler = Scheduler(redis_url, registry=registry)
    try:
        assert [s.name for s in scheduler.schedules()] == ["report-ops"]
        scheduler._follow(scheduler.schedules()[0])
        tick = datetime(2030, 1, 2, 6, 0, tzinfo=UTC)  # 07:00 in Paris
        assert scheduler.run_tick("report-ops", tick).outcome is Outcome.SUCCEEDED
        assert sent == ["ops"]
    finally:
        scheduler.shutdown()


def test_schedules_list_shows_each_schedule_as_text_and_as_json(redis_url: str) -> None:
    cli("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}',
        "--store", redis_url, "--app", APP)
    text = cli("schedules", "list", "--store", redis_url, "--app", APP)
    assert text.returncode == 0 and "report-ops" in text.stdout and '{"to": "ops"}' in text.stdout
    listed = json.loads(cli("schedules", "list", "--json", "--store", redis_url, "--app", APP).stdout)
    assert [(row["name"], row["target"], row["spec"], row["kwargs"]) for row in listed] == [
        ("report-ops", TARGET, "0 7 * * *", {"to": "ops"})]


def test_add_stores_the_run_options_of_a_declared_job_that_a_scheduler_of_the_store_applies(redis_url: str) -> None:
    done = cli("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}',
               "--timeout", "90", "--start-deadline", "30", "--on-busy", "replace", "--pause-on-failure", "3",
               "--store", redis_url, "--app", APP)
    assert (done.returncode, done.stderr) == (0, "")
    listed = json.loads(cli("schedules", "list", "--json", "--store", redis_url, "--app", APP).stdout)
    assert [(row["timeout"], row["start_deadline"], row["on_busy"], row["pause_on_failure"]) for row in listed] == [
        (90.0, 30.0, "replace", 3)]
    registry = Registry()
    registry.allow(lambda to, copies=1: None, TARGET)
    scheduler = Scheduler(redis_url, registry=registry)
    try:
        scheduler._follow(scheduler.schedules()[0])
        job = scheduler.jobs.get("report-ops")
    finally:
        scheduler.shutdown()
    assert (job.timeout, job.start_deadline, job.on_busy, job.pause_on_failure) == (
        timedelta(seconds=90), timedelta(seconds=30), "replace", 3)


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--timeout", "-5", "job 'report-ops': timeout must be > 0, not -5.0"),
    ("--start-deadline", "0", "job 'report-ops': start_deadline must be > 0, not 0.0"),
    ("--on-busy", "queue", "job 'report-ops': on_busy must be one of ('skip', 'wait', 'raise', 'buffer_one', "
                           "'replace'), not 'queue'"),
    ("--pause-on-failure", "0", "job 'report-ops': pause_on_failure must be False or a number of failed runs"),
])
def test_a_bad_run_option_exits_2_with_the_error_mutex_cron_gives(redis_url: str, option: str, value: str,
                                                                   message: str) -> None:
    done = cli("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}',
               option, value, "--store", redis_url, "--app", APP)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert json.loads(cli("schedules", "list", "--json", "--store", redis_url, "--app", APP).stdout) == []


def test_schedules_remove_takes_it_out_of_the_store(redis_url: str) -> None:
    cli("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", '{"to": "ops"}',
        "--store", redis_url, "--app", APP)
    done = cli("schedules", "remove", "report-ops", "--store", redis_url, "--app", APP)
    assert done.returncode == 0 and "removed run-time schedule 'report-ops'" in done.stdout
    store = store_from_url(redis_url)
    try:
        assert store.lock("report-ops") is None  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_target_the_app_does_not_allow_exits_2_naming_it(redis_url: str) -> None:
    done = cli("schedules", "add", "shell", "0 7 * * *", "--target", "os.system", "--store", redis_url, "--app", APP)
    assert done.returncode == 2
    assert "target 'os.system' is not allowed (allowed targets: tests.cli.send)" in done.stderr


def test_kwargs_that_are_not_json_exit_2_naming_the_field(redis_url: str) -> None:
    done = cli("schedules", "add", "report-ops", "0 7 * * *", "--target", TARGET, "--kwargs", "{to: ops}",
               "--store", redis_url, "--app", APP)
    assert done.returncode == 2 and "--kwargs is not JSON" in done.stderr


def test_removing_an_unknown_schedule_exits_1(redis_url: str) -> None:
    done = cli("schedules", "remove", "nightly", "--store", redis_url, "--app", APP)
    assert done.returncode == 1 and "no run-time schedule named 'nightly'" in done.stderr


def test_add_without_a_target_is_a_usage_error(redis_url: str) -> None:
    done = cli("schedules", "add", "report-ops", "0 7 * * *", "--store", redis_url, "--app", APP)
    assert done.returncode == 2 and "--target" in done.stderr

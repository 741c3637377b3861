"""``python -m mutexcron`` as a real process against real Redis (its own key prefix): pause, resume,
schedule and list, their exit statuses and one-line errors, and a Scheduler on the same store seeing the
pause (issue 9)."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mutexcron import Outcome, Registry, Scheduler, mutex_cron
from mutexcron.stores import LockState, store_from_url

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.support.cli_app"
JOB = "tests.cli.hourly"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m mutexcron *args`` in a fresh interpreter with the repository on its path."""
    environ = {key: value for key, value in os.environ.items() if key != "MUTEXCRON_STORE"}
    environ.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run([sys.executable, "-m", "mutexcron", *args], capture_output=True, text=True, env=environ,
                          cwd=ROOT, timeout=60)


@pytest.fixture
def url(redis_url: str) -> str:
    """A Redis store URL under this test's own key prefix."""
    return redis_url


def lock(url: str, name: str = JOB) -> LockState:
    store = store_from_url(url)
    try:
        state = store.lock(name)
    finally:
        store.close()
    assert state is not None
    return state


def scheduler_on(url: str) -> Scheduler:
    """A scheduler of another process's making: its own registry declaring JOB, on the same store."""
    registry = Registry()
    mutex_cron("0 * * * *", name=JOB, registry=registry)(lambda: None)
    return Scheduler(url, registry=registry)


def test_a_pause_by_the_command_line_is_seen_by_a_scheduler_on_the_store(url: str) -> None:
    done = cli("pause", JOB, "--store", url, "--app", APP)

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"paused job {JOB!r} on every instance until resumed (by {getpass.getuser()})\n"
    scheduler = scheduler_on(url)
    try:
        assert scheduler.run_tick(JOB, datetime(2030, 1, 1, tzinfo=UTC)).outcome is Outcome.SKIPPED_PAUSED
        assert scheduler.run_now(JOB).outcome is Outcome.SKIPPED_PAUSED
        assert cli("resume", JOB, "--store", url).returncode == 0
        assert scheduler.run_now(JOB).outcome is Outcome.SUCCEEDED
    finally:
        scheduler.shutdown()


def test_pause_until_and_for(url: str) -> None:
    done = cli("pause", JOB, "--store", url, "--app", APP, "--until", "2099-01-02T03:04:05", "--by", "ops")
    assert done.returncode == 0, done.stderr
    state = lock(url)
    assert (state.paused_until, state.paused_by) == (datetime(2099, 1, 2, 3, 4, 5, tzinfo=UTC), "ops")

    before = datetime.now(UTC)
    assert cli("pause", JOB, "--store", url, "--for", "90s").returncode == 0
    until = lock(url).paused_until
    assert until is not None and before + timedelta(seconds=89) <= until <= datetime.now(UTC) + timedelta(seconds=91)


def test_pause_keeps_a_note_that_list_shows(url: str) -> None:
    done = cli("pause", JOB, "--store", url, "--app", APP, "--by", "ops", "--note", "vendor outage INC-77")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("(by ops): vendor outage INC-77")
    assert lock(url).pause_note == "vendor outage INC-77"
    table = cli("list", "--store", url, "--app", APP).stdout
    listing = json.loads(cli("list", "--json", "--store", url, "--app", APP).stdout)
    assert "NOTE" in table and "vendor outage INC-77" in table
    assert {job["name"]: job for job in listing["jobs"]}[JOB]["paused"]["note"] == "vendor outage INC-77"


def test_a_note_too_long_is_a_usage_error_naming_the_job(url: str) -> None:
    done = cli("pause", JOB, "--store", url, "--app", APP, "--note", "x" * 1001)
    assert done.returncode == 2 and JOB in done.stderr and "pause note" in done.stderr
    store = store_from_url(url)
    try:
        state = store.lock(JOB)
    finally:
        store.close()
    assert state is None or not state.paused


def test_schedule_and_reset(url: str) -> None:
    done = cli("schedule", JOB, "*/5 * * * *", "--timezone", "Asia/Tokyo", "--store", url, "--app", APP)

    assert done.returncode == 0, done.stderr
    assert "now fires on '*/5 * * * *' in Asia/Tokyo" in done.stdout
    state = lock(url)
    assert (state.schedule, state.schedule_timezone, state.schedule_version) == ("*/5 * * * *", "Asia/Tokyo", 1)

    assert cli("schedule", JOB, "--reset", "--store", url, "--app", APP).returncode == 0
    assert (lock(url).schedule, lock(url).schedule_version) == (None, 2)


def test_list_shows_the_apps_jobs_the_pause_and_the_override(url: str) -> None:
    cli("pause", JOB, "--store", url, "--app", APP, "--by", "ops-alice")
    cli("schedule", JOB, "*/5 * * * *", "--store", url, "--app", APP)

    table = cli("list", "--store", url, "--app", APP)
    listing = json.loads(cli("list", "--json", "--store", url, "--app", APP).stdout)

    assert table.returncode == 0
    rows = [line for line in table.stdout.splitlines() if line.startswith(JOB)]
    assert "*/5 * * * * (override v1)" in rows[0] and "(paused)" in rows[0] and "ops-alice" in rows[1]
    assert "tests.cli.morning" in table.stdout and "Europe/Paris" in table.stdout
    jobs = {job["name"]: job for job in listing["jobs"]}
    assert jobs[JOB]["paused"]["by"] == "ops-alice" and jobs[JOB]["override"]["version"] == 1
    assert jobs["tests.cli.morning"]["paused"] is None and jobs["tests.cli.morning"]["lock"]["state"] == "unseeded"


def test_list_chooses_jobs_by_state_and_by_name(url: str) -> None:
    cli("pause", JOB, "--store", url, "--app", APP)

    paused = json.loads(cli("list", "--state", "paused", "--json", "--store", url, "--app", APP).stdout)
    matched = cli("list", "--match", "tests.cli.m*", "--store", url, "--app", APP)

    assert [job["name"] for job in paused["jobs"]] == [JOB] and paused["chosen"] == 1
    assert matched.returncode == 0 and "tests.cli.morning" in matched.stdout and JOB not in matched.stdout


def test_list_refuses_an_unknown_state_naming_it_and_the_known_ones(url: str) -> None:
    done = cli("list", "--state", "late", "--store", url, "--app", APP)

    assert done.returncode == 2 and "'late'" in done.stderr
    assert "'failing', 'overdue', 'paused', 'running'" in done.stderr


def test_the_store_and_the_apps_may_come_before_the_subcommand_as_well_as_after_it(url: str) -> None:
    done = cli("--store", url, "--app", APP, "pause", JOB)

    assert (done.returncode, done.stderr) == (0, "") and lock(url).paused
    # Both sides at once: the --app modules of both are imported; a --store after the subcommand wins.
    listed = cli("--store", "redis://127.0.0.1:1/0", "--app", "tests.support.cli_backfill_app", "list", "--json",
                 "--store", url, "--app", APP)
    assert listed.returncode == 0, listed.stderr
    names = {job["name"] for job in json.loads(listed.stdout)["jobs"]}
    assert {JOB, "tests.backfill.hourly"} <= names


def test_the_store_may_come_from_the_environment(url: str) -> None:
    done = cli("pause", JOB, "--app", APP, env={"MUTEXCRON_STORE": url})

    assert done.returncode == 0 and lock(url).paused


# -- errors: one line on stderr, 1 or 2 ---------------------------------------------------------------------


@pytest.mark.parametrize("args", [["pause"], ["resume"], ["schedule", "--reset"]], ids=lambda a: a[0])
def test_an_unknown_job_exits_1(url: str, args: list[str]) -> None:
    done = cli(args[0], "tests.cli.nope", *args[1:], "--store", url)

    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "has no job named 'tests.cli.nope'" in done.stderr


def test_a_bad_spec_exits_1_and_writes_nothing(url: str) -> None:
    done = cli("schedule", JOB, "61 * * * *", "--store", url, "--app", APP)

    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "minute" in done.stderr
    store = store_from_url(url)
    try:
        assert store.lock(JOB) is None
    finally:
        store.close()


def test_an_unreachable_store_exits_1_without_its_password() -> None:
    done = cli("pause", JOB, "--store", "redis://:s3cret-pw@127.0.0.1:1/0", "--app", APP)

    assert done.returncode == 1 and "cannot be reached" in done.stderr and done.stderr.count("\n") == 1
    assert "s3cret-pw" not in done.stderr + done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["pause", JOB, "--for", "2h30x"], "'2h30x' is not a duration"),
    (["pause", JOB, "--until", "2001-01-01"], "'2001-01-01' is in the past"),
    (["pause", JOB, "--until", "2099-01-01", "--for", "1h"], "--until and --for do not go together"),
    (["schedule", JOB], "give the new SPEC"),
    (["frobnicate"], "invalid choice"),
    (["pause", JOB, "--app", "tests.no_such_module"], "--app 'tests.no_such_module' cannot be imported"),
])
def test_usage_errors_exit_2(url: str, args: list[str], message: str) -> None:
    done = cli(*args, "--store", url)

    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_malformed_store_url_exits_2_without_its_password() -> None:
    done = cli("list", "--store", "redis://:s3cret-pw@host:port/0")

    assert done.returncode == 2 and "s3cret-pw" not in done.stderr and done.stderr.count("\n") == 1


def test_no_store_at_all_exits_2() -> None:
    done = cli("list")

    assert done.returncode == 2 and "--store URL or $MUTEXCRON_STORE" in done.stderr

"""``python -m mutexcron backfill NAME START END`` as a real process against real Redis (its own key prefix):
the ticks it runs, the times it reads in the job's zone, a rerun that runs nothing new, and its exit statuses."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from mutexcron.stores import store_from_url
from tests.test_cli import cli

APP = "tests.support.cli_backfill_app"  # not imported here: it declares its jobs in the default registry
TICKS_ENV = "MUTEXCRON_TEST_TICKS"  # the file its jobs note their runs in
HOURLY = "tests.backfill.hourly"
Done = subprocess.CompletedProcess[str]


@pytest.fixture
def ticks_file(tmp_path: Path) -> Path:
    return tmp_path / "ticks.jsonl"


@pytest.fixture
def backfill(redis_url: str, ticks_file: Path) -> Callable[..., Done]:
    """``backfill(*args)``: ``python -m mutexcron backfill *args`` on this test's Redis prefix, with the app."""
    def run(*args: str) -> Done:
        return cli("backfill", *args, "--store", redis_url, "--app", APP, env={TICKS_ENV: str(ticks_file)})

    return run


def ran(ticks_file: Path) -> list[tuple[str, str, bool]]:
    """(job, tick, backfill) of each run the jobs noted, in the order they ran."""
    if not ticks_file.exists():
        return []
    lines = [json.loads(line) for line in ticks_file.read_text().splitlines()]
    return [(line["job"], line["tick"], line["backfill"]) for line in lines]


def test_backfill_runs_each_tick_of_the_range_and_prints_how_many(backfill: Callable[..., Done],
                                                                  ticks_file: Path) -> None:
    done = backfill(HOURLY, "2026-01-05T00:00:00+00:00", "2026-01-05T03:00:00+00:00", "--by", "ops")

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (f"job {HOURLY!r}: backfill from 2026-01-05T00:00:00+00:00 to "
                           "2026-01-05T03:00:00+00:00 ran 3 tick(s)\n")
    assert ran(ticks_file) == [(HOURLY, f"2026-01-05T0{hour}:00:00+00:00", True) for hour in range(3)]


def test_times_without_an_offset_are_read_in_the_jobs_zone(backfill: Callable[..., Done],
                                                           ticks_file: Path) -> None:
    done = backfill("tests.backfill.paris", "2026-07-01", "2026-07-03")

    assert done.returncode == 0
    assert "from 2026-07-01T00:00:00+02:00 to 2026-07-03T00:00:00+02:00 ran 2 tick(s)" in done.stdout
    assert [tick for _, tick, _ in ran(ticks_file)] == ["2026-07-01T04:30:00+00:00", "2026-07-02T04:30:00+00:00"]


def test_the_same_range_run_again_runs_nothing_new(backfill: Callable[..., Done], ticks_file: Path,
                                                   redis_url: str) -> None:
    assert backfill(HOURLY, "2026-01-05T00:00Z", "2026-01-05T02:00Z").returncode == 0
    again = backfill(HOURLY, "2026-01-05T00:00Z", "2026-01-05T02:00Z")

    assert again.returncode == 0
    assert again.stdout.endswith("ran 0 tick(s); 2 already run by a backfill of this range\n")
    assert len(ran(ticks_file)) == 2
    store = store_from_url(redis_url)
    try:
        assert [state.name for state in store.locks()] == [HOURLY]  # the backfill's ledger is hidden
    finally:
        store.close()


def test_a_failed_tick_exits_1_after_the_other_ticks_ran(backfill: Callable[..., Done], ticks_file: Path) -> None:
    done = backfill("tests.backfill.failing", "2026-01-05T00:00Z", "2026-01-05T03:00Z")

    assert done.returncode == 1 and done.stdout == ""
    assert "ran 3 tick(s), 1 failed" in done.stderr and done.stderr.count("\n") == 1
    assert len(ran(ticks_file)) == 3


def test_a_paused_job_exits_1_saying_it_stopped(backfill: Callable[..., Done], redis_url: str,
                                                ticks_file: Path) -> None:
    assert cli("pause", HOURLY, "--store", redis_url, "--app", APP).returncode == 0

    done = backfill(HOURLY, "2026-01-05T00:00Z", "2026-01-05T03:00Z")

    assert done.returncode == 1 and ran(ticks_file) == []
    assert "ran 0 tick(s); stopped at 2026-01-05T00:00:00+00:00: the job is paused" in done.stderr


@pytest.mark.parametrize(("start", "end", "message"), [
    ("yesterday", "2026-01-05T03:00Z", "START 'yesterday' is not an ISO-8601 time"),
    ("2026-01-05T03:00Z", "2026-01-05T01:00Z", "end must be after start"),
    ("2021-01-05T00:00Z", "2023-01-05T00:00Z", "more than 10000 ticks (about 17520)"),
])
def test_bad_input_exits_2_and_runs_nothing(backfill: Callable[..., Done], ticks_file: Path, start: str, end: str,
                                            message: str) -> None:
    done = backfill(HOURLY, start, end)

    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and ran(ticks_file) == []


def test_an_end_after_the_stores_now_exits_2_naming_it_and_the_stores_now(backfill: Callable[..., Done],
                                                                          ticks_file: Path, redis_url: str) -> None:
    store = store_from_url(redis_url)
    try:
        end = (store.now() + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    finally:
        store.close()
    done = backfill(HOURLY, (end - timedelta(hours=5)).isoformat(), end.isoformat())

    assert done.returncode == 2 and ran(ticks_file) == [] and done.stderr.count("\n") == 1
    assert f"end {end.isoformat()} is after the lock store's now (" in done.stderr, done.stderr


def test_an_unknown_job_exits_1(backfill: Callable[..., Done]) -> None:
    done = backfill("tests.backfill.nope", "2026-01-05T00:00Z", "2026-01-05T03:00Z")

    assert done.returncode == 1 and "no job named 'tests.backfill.nope'" in done.stderr


def test_an_unreachable_store_exits_1_without_its_password(ticks_file: Path) -> None:
    done = cli("backfill", HOURLY, "2026-01-05T00:00Z", "2026-01-05T03:00Z", "--app", APP,
               "--store", "redis://:s3cret-pw@127.0.0.1:1/0", env={TICKS_ENV: str(ticks_file)})

    assert done.returncode == 1 and "cannot be reached" in done.stderr and done.stderr.count("\n") == 1
    assert "s3cret-pw" not in done.stderr + done.stdout and ran(ticks_file) == []


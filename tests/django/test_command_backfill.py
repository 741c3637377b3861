"""``manage.py mutexcron backfill NAME START END``, on the SQL store and on Redis: the ticks it runs, what the
run history keeps of them, and its exit statuses (the core's action, shared with ``python -m mutexcron``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management.base import CommandError
from django.test import override_settings

from mutexcron import JobContext
from mutexcron_django.models import JobRun
from tests.django.jobhelpers import Declarations
from tests.django.test_command_control import mutexcron

JOB = "tests.backfill.command"
pytestmark = pytest.mark.django_db  # the history's tables, and the SQL store's (the Redis runs need none)
MIDNIGHT = datetime(2026, 1, 5, tzinfo=UTC)


@pytest.fixture(params=["sql", "redis"])
def ticks(request: pytest.FixtureRequest, declare: Declarations) -> Iterator[list[JobContext]]:
    """The settings' store (the project's database, or Redis under this test's own prefix), with JOB declared
    hourly in Europe/Paris; the contexts its runs got."""
    url = "django://" if request.param == "sql" else request.getfixturevalue("redis_url")
    contexts: list[JobContext] = []

    def body(ctx: JobContext) -> None:
        contexts.append(ctx)
        if ctx.fire_time.hour == 13:
            raise RuntimeError("the 13:00 tick fails")

    declare("0 * * * *", body, name=JOB, timezone="Europe/Paris")
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": url}):
        yield contexts


def test_backfill_runs_the_ticks_reading_times_in_the_jobs_zone_and_prints_how_many(ticks: list[JobContext]) -> None:
    output = mutexcron("backfill", JOB, "2026-01-05T01:00", "2026-01-05T04:00", "--by", "ops")

    assert output.strip() == (f"job {JOB!r}: backfill from 2026-01-05T01:00:00+01:00 to 2026-01-05T04:00:00+01:00 "
                              "ran 3 tick(s)")
    assert [ctx.fire_time for ctx in ticks] == [MIDNIGHT + timedelta(hours=hour) for hour in range(3)]


def test_the_history_keeps_a_row_of_its_own_for_each_backfilled_run(ticks: list[JobContext]) -> None:
    mutexcron("backfill", JOB, "2026-01-05T00:00Z", "2026-01-05T02:00Z")
    mutexcron("backfill", JOB, "2026-01-05T00:00Z", "2026-01-05T02:00Z")  # runs nothing new: writes no row

    rows = JobRun.objects.filter(job_name=JOB).order_by("fire_time")
    assert [(row.fire_time, row.outcome, row.backfill, row.tick_key) for row in rows] == [
        (MIDNIGHT, "succeeded", True, None), (MIDNIGHT + timedelta(hours=1), "succeeded", True, None)]


def test_a_failed_tick_is_an_error_after_the_other_ticks_ran(ticks: list[JobContext]) -> None:
    with pytest.raises(CommandError, match=r"ran 3 tick\(s\), 1 failed") as raised:
        mutexcron("backfill", JOB, "2026-01-05T11:00Z", "2026-01-05T14:00Z")

    assert raised.value.returncode == 1 and len(ticks) == 3
    assert JobRun.objects.get(job_name=JOB, outcome="failed").fire_time == datetime(2026, 1, 5, 13, tzinfo=UTC)


@pytest.mark.parametrize(("start", "end", "message"), [
    ("2026-01-05T03:00Z", "2026-01-05T01:00Z", "end must be after start"),
    ("2021-01-05T00:00Z", "2023-01-05T00:00Z", "more than 10000 ticks"),
    ("2026-01-05T00:00Z", "2126-01-05T00:00Z", r"end 2126-01-05T00:00:00\+00:00 is after the lock store's now"),
    ("soon", "2026-01-05T01:00Z", "START 'soon' is not an ISO-8601 time"),
])
def test_bad_input_is_an_error_with_exit_status_2(ticks: list[JobContext], start: str, end: str,
                                                  message: str) -> None:
    with pytest.raises(CommandError, match=message) as raised:
        mutexcron("backfill", JOB, start, end)

    assert raised.value.returncode == 2 and ticks == []


def test_an_unknown_job_is_an_error(ticks: list[JobContext]) -> None:
    with pytest.raises(CommandError, match=r"no job named 'tests\.nope'") as raised:
        mutexcron("backfill", "tests.nope", "2026-01-05T00:00Z", "2026-01-05T01:00Z")

    assert raised.value.returncode == 1

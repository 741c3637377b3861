"""Jobs for the backfill command's tests (``--app tests.support.cli_backfill_app``): each run appends its tick and
its flags to the file named by $MUTEXCRON_TEST_TICKS, one JSON line a run."""

from __future__ import annotations

import json
import os

from mutexcron import JobContext, mutex_cron

TICKS_ENV = "MUTEXCRON_TEST_TICKS"


def note(ctx: JobContext) -> None:
    """Append this run's tick to $MUTEXCRON_TEST_TICKS (one write of a line: runs in other processes interleave
    whole lines)."""
    line = json.dumps({"job": ctx.job_name, "tick": ctx.fire_time.isoformat(), "backfill": ctx.backfill}) + "\n"
    fd = os.open(os.environ[TICKS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@mutex_cron("0 * * * *", name="tests.backfill.hourly")
def hourly(ctx: JobContext) -> None:
    note(ctx)


@mutex_cron("30 6 * * *", name="tests.backfill.paris", timezone="Europe/Paris")
def paris(ctx: JobContext) -> None:
    note(ctx)


@mutex_cron("0 * * * *", name="tests.backfill.failing")
def failing(ctx: JobContext) -> None:
    note(ctx)
    if ctx.fire_time.hour == 1:
        raise RuntimeError(f"tick {ctx.fire_time.isoformat()} failed")

"""Jobs of the ``mutexcron run`` subprocess tests; each appends a line to $MUTEXCRON_TEST_RUN_OUTPUT."""

from __future__ import annotations

import os
import time

from mutexcron import JobContext, mutex_cron


def _write(line: str) -> None:
    with open(os.environ["MUTEXCRON_TEST_RUN_OUTPUT"], "a", encoding="utf-8") as output:
        output.write(line + "\n")


@mutex_cron("* * * * * *", name="runjobs.tick")
def tick(ctx: JobContext) -> None:
    _write(f"tick {ctx.fire_time.isoformat()} {ctx.instance_id}")


@mutex_cron("* * * * * *", name="runjobs.slow")
def slow(ctx: JobContext) -> None:
    """Takes a while, so that a shutdown finds it running and has to wait for it."""
    _write(f"slow-start {ctx.fire_time.isoformat()}")
    time.sleep(float(os.environ.get("MUTEXCRON_TEST_RUN_SLOW_SECONDS", "1.5")))
    _write(f"slow-end {ctx.fire_time.isoformat()}")

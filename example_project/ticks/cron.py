"""The demo's jobs. mutexcron_django imports ``<app>.cron`` of every installed app at start-up.

Every instance fires each of them at every tick; the lock row in the database picks one to run it.
"""

from __future__ import annotations

import os
from datetime import timedelta

from django.utils import timezone

from mutexcron import JobContext, mutex_cron

from .models import Tick


@mutex_cron("*/5 * * * * *", name="ticks.record_tick", lease=timedelta(seconds=30), alert_after=timedelta(seconds=3))
def record_tick(ctx: JobContext) -> None:
    """Every 5 seconds: write down which instance ran this tick."""
    Tick.objects.create(fire_time=ctx.fire_time, instance_id=ctx.instance_id, pid=os.getpid(), token=ctx.token)


@mutex_cron("*/3 * * * * *", name="ticks.slow_export", lease=timedelta(seconds=30), on_busy="buffer_one")
def slow_export(ctx: JobContext) -> None:
    """Every 3 seconds, a body of 4: the tick that fires meanwhile waits and runs right after the last run ends
    (on_busy="buffer_one"), the one after it is skipped as busy; the admin's timeline shows the runs back to back."""
    ctx.cancelled.wait(4)


@mutex_cron("0 30 3 * * *", name="ticks.daily_cleanup", lease=timedelta(minutes=5))
def daily_cleanup() -> None:
    """03:30:00 UTC every day: forget ticks older than a week."""
    Tick.objects.filter(fire_time__lt=timezone.now() - timedelta(days=7)).delete()


@mutex_cron("*/20 * * * * *", name="ticks.always_fails", lease=timedelta(seconds=30), pause_on_failure=3)
def always_fails(ctx: JobContext) -> None:
    """Every 20 seconds: raise, to show a failed run (with its traceback) in the admin's job run history. After 3
    failed runs in a row (a minute) it pauses itself on every instance, with a note the admin's Locks page shows."""
    raise RuntimeError(f"demo failure of tick {ctx.fire_time:%H:%M:%S} on {ctx.instance_id}")

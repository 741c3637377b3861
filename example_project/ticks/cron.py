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


@mutex_cron("0 30 3 * * *", name="ticks.daily_cleanup", lease=timedelta(minutes=5))
def daily_cleanup() -> None:
    """03:30:00 UTC every day: forget ticks older than a week."""
    Tick.objects.filter(fire_time__lt=timezone.now() - timedelta(days=7)).delete()


@mutex_cron("*/20 * * * * *", name="ticks.always_fails", lease=timedelta(seconds=30))
def always_fails(ctx: JobContext) -> None:
    """Every 20 seconds: raise, to show a failed run (with its traceback) in the admin's job run history."""
    raise RuntimeError(f"demo failure of tick {ctx.fire_time:%H:%M:%S} on {ctx.instance_id}")

"""Helpers for a Django project's tests: run one tick of a job on the configured store and history."""

from __future__ import annotations

from datetime import UTC, datetime

from mutexcron import RunRecord, default_registry, next_fire_times

from .runtime import build_scheduler


def run_tick(name: str, *, fire_time: datetime | None = None) -> RunRecord:
    """Run job ``name``'s tick at ``fire_time`` (default: its next one) synchronously under its lock, on
    ``MUTEXCRON['STORE']``, recording history and sending signals as the running scheduler would."""
    scheduler = build_scheduler()
    try:
        if fire_time is None:
            # In the job's zone, else the scheduler's (MUTEXCRON['TIMEZONE']), as the scheduler fires it.
            job = default_registry.get(name)
            (fire_time,) = next_fire_times(job.spec, after=datetime.now(UTC),
                                           timezone=job.timezone or scheduler.timezone)
        return scheduler.run_tick(name, fire_time)
    finally:
        scheduler.shutdown()  # stops its heartbeat thread and closes the store it built

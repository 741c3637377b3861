"""Helpers for your own tests: run one tick of a job synchronously, under its lock, and get its RunRecord."""

from __future__ import annotations

from datetime import datetime

from .cron import next_fire_times
from .records import RunRecord
from .registry import Registry, default_registry
from .scheduling.scheduler import Scheduler
from .stores import LockStore


def next_tick(name: str, *, registry: Registry | None = None, after: datetime | None = None) -> datetime:
    """The job's next scheduled fire time after ``after`` (default: now), aware UTC."""
    from datetime import UTC

    job = (default_registry if registry is None else registry).get(name)
    after = after or datetime.now(UTC)
    (fire,) = next_fire_times(job.spec, after=after, timezone=job.timezone or "UTC")
    return fire.astimezone(UTC)


def run_tick(
    name: str,
    *,
    fire_time: datetime | None = None,
    store: str | LockStore = "memory://",
    registry: Registry | None = None,
    instance_id: str = "test",
) -> RunRecord:
    """Run job ``name``'s tick at ``fire_time`` (default: its next one) now, as the trigger would, and
    return the RunRecord: ``succeeded``/``failed``, or ``skipped_already_ran`` if that tick already ran."""
    registry = default_registry if registry is None else registry
    scheduler = Scheduler(store, registry=registry, instance_id=instance_id)
    try:
        return scheduler.run_tick(name, fire_time or next_tick(name, registry=registry))
    finally:
        scheduler.shutdown()  # stops its heartbeat thread; closes the store if it built it

"""Helpers for a Django project's tests: run one tick of a job on the configured store and history."""

from __future__ import annotations

from datetime import datetime

from mutexcron import RunRecord, default_registry
from mutexcron.testing import next_tick

from .runtime import build_scheduler


def run_tick(name: str, *, fire_time: datetime | None = None) -> RunRecord:
    """Run job ``name``'s tick at ``fire_time`` (default: its next one) synchronously under its lock, on
    ``MUTEXCRON['STORE']``, recording history and sending signals as the running scheduler would."""
    scheduler = build_scheduler()
    return scheduler.run_tick(name, fire_time or next_tick(name, registry=default_registry))

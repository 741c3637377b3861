"""What the Run-time schedules page shows: each run-time schedule of the configured store, read live as the Locks
page reads it, with its definition, spec in words, state and next fires; and the scheduler built from settings and
never started through which the page writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils import timezone as dj_timezone

from mutexcron import Scheduler, default_registry
from mutexcron.definitions import ScheduleDefinition
from mutexcron.ops.listing import JobLine, job_line
from mutexcron.stores import LockState, require_control

from ..runtime import build_scheduler
from .display import show_time, zone_name
from .lock_rows import read_store
from .schedules import JobSchedule, describe, job_schedule, paused_line


@contextmanager
def settings_scheduler() -> Iterator[Scheduler]:
    """A scheduler built from settings and never started (it reads and writes the store), shut down after."""
    scheduler = build_scheduler()
    try:
        yield scheduler
    finally:
        scheduler.shutdown()


def schedule_state(scheduler: Scheduler, name: str) -> LockState | None:
    """Run-time schedule ``name``'s lock document, or None if the store has no run-time schedule of that name."""
    state = require_control(scheduler.store, f"read run-time schedule {name!r}").lock(name)
    return state if state is not None and state.definition is not None else None


@dataclass
class ScheduleRow:
    """One run-time schedule as listed: its stored definition, and the schedule it fires on in this process
    (None, with ``error``, if this process cannot build it: its target is not allowed here)."""

    state: LockState
    definition: ScheduleDefinition | None
    schedule: JobSchedule | None
    now: datetime
    error: str = ""
    fires: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def kwargs_json(self) -> str:
        return json.dumps(self.definition.kwargs, sort_keys=True) if self.definition else ""

    @property
    def description(self) -> str:
        return describe(self.definition.spec) if self.definition else ""

    @property
    def enabled(self) -> bool:
        return not self.state.is_paused(self.now)

    @property
    def paused_line(self) -> str:
        return paused_line(self.state, self.now)

    @property
    def changed(self) -> str:
        return show_time(self.state.schedule_changed_at)

    @property
    def change_url(self) -> str:
        return reverse("admin:mutexcron_schedule_change", args=[quote(self.name)])

    @property
    def delete_url(self) -> str:
        return reverse("admin:mutexcron_schedule_delete", args=[quote(self.name)])

    @property
    def job_url(self) -> str:
        return reverse("admin:mutexcron_lock_history", args=[quote(self.name)])


def schedule_row(state: LockState, line: JobLine | None, zone: tzinfo, now: datetime) -> ScheduleRow:
    """``state``'s row: its definition read, and its job as every instance builds it (``line``: the listing's, None
    where the listing could not build it, which this row then says why)."""
    try:
        definition = ScheduleDefinition.from_json(state.definition or "")
    except ValueError as error:
        return ScheduleRow(state, None, None, now, error=str(error))
    try:
        built = line or job_line(definition.job(state.name, default_registry), state, zone, now)
    except ValueError as error:  # JobDefinitionError: a target this process does not allow, ...
        return ScheduleRow(state, definition, None, now, error=str(error))
    schedule = job_schedule(built)
    return ScheduleRow(state, definition, schedule, now, fires=schedule.fires(now))


@dataclass
class ScheduleListing:
    """The page's rows, the store's description and clock, the scheduler's zone; or why they could not be read."""

    rows: list[ScheduleRow] = field(default_factory=list)
    store: str = ""
    zone: str = ""
    store_time: str = ""
    error: str = ""


def read_schedules() -> ScheduleListing:
    """Every run-time schedule of the configured store, read as the Locks page reads it (:func:`read_store`); an
    unreachable, misconfigured or control-less store gives ``error`` (the page shows it)."""
    listing = read_store(dj_timezone.now())
    if listing.error is not None:
        return ScheduleListing(store=listing.store, zone=zone_name(listing.timezone), error=listing.error)
    lines = {line.job.name: line for line in listing.jobs}
    rows = [schedule_row(state, lines.get(name), listing.timezone, listing.now)
            for name, state in sorted(listing.locks.items()) if state.definition is not None]
    return ScheduleListing(rows, listing.store, zone_name(listing.timezone), show_time(listing.now))

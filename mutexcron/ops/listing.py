"""What ``list`` shows, for ``python -m mutexcron`` and ``manage.py mutexcron`` alike: each declared job with
the schedule it fires on (the operator's override or the code's), its next fire and its lock; the paused
and overridden jobs in detail; and the orphan locks. As a plain-text table or as JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from ..cron import CronTrigger, iter_fire_times
from ..definitions import with_stored
from ..errors import StoreUnavailable
from ..registry import Job, Registry
from ..stores import LockState, LockStore, require_control
from .control import effective_trigger

__all__ = ["JobLine", "Listing", "iso", "job_line", "listing_json", "listing_text", "lock_state", "read_listing",
           "table", "unread_listing", "when"]


def when(value: datetime | None, zone: tzinfo = UTC) -> str:
    if value is None:
        return "-"
    return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value is not None else None


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * width for width in widths], *rows]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def lock_state(state: LockState | None, now: datetime) -> str:
    """``held`` (a live lease), ``expired`` (taken, lease ran out), ``free``, or ``unseeded`` (no document)."""
    if state is None:
        return "unseeded"
    if state.is_held(now):
        return "held"
    return "expired" if state.locked else "free"


@dataclass(frozen=True)
class JobLine:
    """A declared job as listed: the trigger it fires on, its next fire and its lock document. ``error`` says why
    the store's schedule override could not be read (the line then shows the code's schedule)."""

    job: Job
    trigger: CronTrigger
    next_fire: datetime | None
    state: LockState | None
    error: str | None = None

    @property
    def spec(self) -> str:
        return str(self.trigger.spec)

    @property
    def zone(self) -> tzinfo:
        return self.trigger.timezone

    @property
    def overridden(self) -> bool:
        return self.error is None and self.state is not None and self.state.schedule is not None


def job_line(job: Job, state: LockState | None, default_zone: tzinfo, now: datetime) -> JobLine:
    """``job``'s line given its lock document ``state``: its next fire after ``now`` on the store's override,
    or on the code's schedule if this process cannot read the override."""
    try:
        trigger, error = effective_trigger(job, state, default_zone), None
    except ValueError as problem:  # CronSpecError, or a zone this process does not know
        trigger, error = job.trigger(default_zone), str(problem)
    return JobLine(job, trigger, next(iter_fire_times(trigger, now), None), state, error)


@dataclass(frozen=True)
class Listing:
    """What ``list`` read: ``now`` is the store's clock (this machine's if the store could not be read);
    ``locks`` every lock document, by name."""

    store: str
    timezone: tzinfo
    jobs: list[JobLine]
    orphans: list[LockState]
    now: datetime
    error: str | None
    locks: dict[str, LockState] = dataclasses.field(default_factory=dict)
    chosen: int | None = None  # narrowed (mutexcron.ops.selection): how many jobs it chose, before its page
    chosen_by: str = ""  # that selection in words

    def paused(self) -> list[JobLine]:
        return [line for line in self.jobs if line.state is not None and line.state.is_paused(self.now)]

    def status(self, state: LockState | None) -> str:
        """:func:`lock_state` of ``state`` on the store's clock; ``unknown`` if the store could not be read."""
        return "unknown" if self.error is not None else lock_state(state, self.now)


def read_listing(store: LockStore, registry: Registry, default_zone: tzinfo, now: datetime) -> Listing:
    """Read every lock of ``store`` once; a store that cannot be reached gives a listing with ``error``, one
    without the control plane raises ControlNotSupported."""
    controls = require_control(store, "list its locks")
    try:
        locks = {state.name: state for state in controls.locks()}
        store_now = store.now()
    except StoreUnavailable as problem:
        return unread_listing(repr(store), registry, default_zone, now, str(problem))
    return _listing(Listing(repr(store), default_zone, [], [], store_now, None, locks), registry, now)


def unread_listing(store: str, registry: Registry, default_zone: tzinfo, now: datetime, error: str) -> Listing:
    """The listing of a store that could not be read (``error``): the declared jobs, without their locks."""
    return _listing(Listing(store, default_zone, [], [], now, error), registry, now)


def _listing(read: Listing, registry: Registry, now: datetime) -> Listing:
    """``read`` with its jobs (the declared jobs and the run-time schedules of its locks) and orphan locks."""
    shown = with_stored(registry, read.locks)
    jobs = [job_line(job, read.locks.get(job.name), read.timezone, now) for job in shown]
    orphans = [state for name, state in sorted(read.locks.items()) if name not in shown and state.definition is None]
    return dataclasses.replace(read, jobs=jobs, orphans=orphans)


# -- JSON -------------------------------------------------------------------------------------------------


def listing_json(listing: Listing) -> dict[str, Any]:
    """``spec``, ``timezone`` and ``next_fire`` are what the job fires on; ``code_spec`` what the code says."""
    return {
        "store": listing.store,
        "store_error": listing.error,
        "timezone": str(listing.timezone),
        "jobs": [{
            "name": line.job.name,
            "spec": line.spec,
            "timezone": str(line.zone),
            "code_spec": str(line.job.spec),
            "next_fire": line.next_fire.astimezone(line.zone).isoformat() if line.next_fire else None,
            "paused": _paused_json(line.state, listing.now),
            "override": _override_json(line.state),
            "lock": None if listing.error else _lock_json(line.state, listing.now),
        } for line in listing.jobs],
        "orphan_locks": [_lock_json(state, listing.now) for state in listing.orphans],
        **({"chosen": listing.chosen, "chosen_by": listing.chosen_by} if listing.chosen is not None else {}),
    }


def _paused_json(state: LockState | None, now: datetime) -> dict[str, Any] | None:
    if state is None or not state.is_paused(now):
        return None
    return {"since": iso(state.paused_at), "by": state.paused_by, "until": iso(state.paused_until),
            "note": state.pause_note}


def _one_line(note: str | None, width: int = 60) -> str:
    """A pause note for a table cell: one line, clipped to ``width`` characters ("-" for none)."""
    if not note:
        return "-"
    line = " ".join(note.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _override_json(state: LockState | None) -> dict[str, Any] | None:
    if state is None or state.schedule is None:
        return None
    return {"spec": state.schedule, "timezone": state.schedule_timezone, "version": state.schedule_version,
            "by": state.schedule_by, "changed_at": iso(state.schedule_changed_at)}


def _lock_json(state: LockState | None, now: datetime) -> dict[str, Any]:
    """The lock document's fields as the store holds them (times in ISO), its state and whether it is held."""
    fields: dict[str, Any] = {"state": lock_state(state, now)}
    if state is not None:
        for field in dataclasses.fields(state):
            value = getattr(state, field.name)
            fields[field.name] = iso(value) if isinstance(value, datetime) else value
        fields["held"] = state.is_held(now)
    return fields


# -- text -------------------------------------------------------------------------------------------------


def listing_text(listing: Listing, *, command: str, no_jobs: str, orphans: str) -> str:
    """The tables: jobs, paused jobs, schedule overrides, orphan locks. ``command`` starts the hints
    (``manage.py mutexcron``); ``no_jobs`` and ``orphans`` head those cases."""
    now, failed = listing.now, listing.error is not None
    parts = [f"Store: {listing.store}"]
    if not listing.jobs:
        parts.append(no_jobs if listing.chosen is None else f"No job chosen by {listing.chosen_by}.")
    else:
        rows = []
        for line in listing.jobs:
            known = None if failed else line.state
            taken = known is not None and known.locked
            halted = known is not None and known.is_paused(now)
            rows.append([
                line.job.name + (" (run-time)" if line.job.runtime else ""),
                line.spec + (f" (override v{_state(line).schedule_version})" if line.overridden else ""),
                str(line.zone), when(line.next_fire, line.zone),
                listing.status(line.state) + (" (paused)" if halted else ""),
                (known.locked_by or "-") if known is not None and taken else "-",
                when(known.lock_until) if known is not None and taken else "-",
                when(known.last_fire_time) if known is not None else "-",
            ])
        headers = ["JOB", "SCHEDULE", "TIMEZONE", "NEXT FIRE", "LOCK", "HOLDER", "LEASE UNTIL", "LAST FIRE"]
        parts.append(table(headers, rows))
    if listing.chosen is not None and listing.jobs:
        parts.append(f"{len(listing.jobs)} of the {listing.chosen} job(s) chosen by {listing.chosen_by}")
    paused = listing.paused()
    if paused:
        parts += ["", f"Paused jobs (no run starts until the time shown; lift with: {command} resume NAME):",
                  table(["JOB", "PAUSED SINCE", "BY", "UNTIL", "NOTE"],
                        [[line.job.name, when(_state(line).paused_at), _state(line).paused_by or "-",
                          when(_state(line).paused_until) if _state(line).paused_until else "until resumed",
                          _one_line(_state(line).pause_note)]
                         for line in paused])]
    overridden = [line for line in listing.jobs if line.overridden]
    if overridden:
        parts += ["", f"Schedule overrides (back to the code's with: {command} schedule NAME --reset):",
                  table(["JOB", "OVERRIDE", "TIMEZONE", "VERSION", "CODE'S SCHEDULE", "BY", "CHANGED"],
                        [[line.job.name, line.spec, str(line.zone), str(_state(line).schedule_version),
                          str(line.job.spec), _state(line).schedule_by or "-", when(_state(line).schedule_changed_at)]
                         for line in overridden])]
    if listing.orphans:
        rows = [[state.name, lock_state(state, now), (state.locked_by or "-") if state.locked else "-",
                 when(state.lock_until) if state.locked else "-", when(state.last_fire_time)]
                for state in listing.orphans]
        parts += ["", orphans, table(["LOCK NAME", "LOCK", "HOLDER", "LEASE UNTIL", "LAST FIRE"], rows)]
    return "\n".join(parts)


def _state(line: JobLine) -> LockState:
    assert line.state is not None  # paused and overridden lines have a document
    return line.state


"""Run-time schedules as operators change them (:meth:`Scheduler.add_schedule`, ``remove_schedule``, the CLI and
the admin): a checked definition stored on the job's lock document, or taken off it. What a definition is and the
job each instance builds from it: :mod:`mutexcron.definitions`."""

from __future__ import annotations

import logging

from ..definitions import ScheduleDefinition, check_overlap, checked_definition
from ..errors import JobDefinitionError, UnknownJobError
from ..registry import Registry
from ..stores import LockState, LockStore, require_control
from ..stores.values import MAX_TEXT
from ..urls import shown

__all__ = ["add", "remove", "stored"]

logger = logging.getLogger("mutexcron.scheduler")


def add(store: LockStore, jobs: Registry, name: str, definition: ScheduleDefinition, *,
        by: str | None = None) -> LockState:
    """Check ``definition`` and store it on ``name``'s lock document (:meth:`ControlStore.define`)."""
    control = require_control(store, "add a run-time schedule")
    text = checked_definition(name, definition, jobs)
    check_overlap(store, [definition.job(name, jobs)])  # on_busy buffer_one or replace: the store keeps the slot
    if by is not None and (not isinstance(by, str) or len(by) > MAX_TEXT):
        raise JobDefinitionError(f"schedule {name!r}: by must be a string of at most {MAX_TEXT} characters, "
                                 f"not {shown(by)}")
    existing = control.lock(name)
    if existing is not None and existing.definition is None:
        raise JobDefinitionError(f"schedule {name!r}: the store has a lock of that name that is no run-time schedule "
                                 "(a job declared on other instances, or an orphan lock: delete it first)")
    state = control.define(name, text, by=by)
    assert state is not None  # define() of a definition always leaves a document
    logger.info("run-time schedule %r defined by %s: %s", name, by or "?", text)
    return state


def remove(store: LockStore, jobs: Registry, name: str, *, by: str | None = None) -> LockState:
    """Remove run-time schedule ``name`` from the store: its document hidden, acquires for it refused as stale."""
    control = require_control(store, "remove a run-time schedule")
    if jobs.base is not None and name in jobs.base:
        raise JobDefinitionError(f"job {name!r} is declared in code, not a run-time schedule; it cannot be removed")
    state = control.lock(name)
    removed = control.define(name, None, by=by) if state is not None and state.definition is not None else None
    if removed is None:
        known = ", ".join(schedule.name for schedule in stored(store)) or "none"
        raise UnknownJobError(f"no run-time schedule named {name!r} (run-time schedules: {known})")
    logger.info("run-time schedule %r removed by %s", name, by or "?")
    return removed


def stored(store: LockStore) -> list[LockState]:
    """The run-time schedules ``store`` holds, sorted by name."""
    return [state for state in require_control(store, "list run-time schedules").locks()
            if state.definition is not None]

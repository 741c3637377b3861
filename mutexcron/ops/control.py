"""Run-time control, worked out from a job and its lock document: the effective schedule (the operator's
override or the code's), the ticks a restart or an outage missed, and each tick's jitter.

Pure functions of their arguments, so every instance that reads the same document decides the same.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from itertools import takewhile
from typing import TYPE_CHECKING

from ..cron import CronTrigger, iter_fire_times, parse_cron, resolve_timezone
from ..cron_intervals import check_jitter
from ..errors import CronSpecError, UnknownJobError
from ..stores.base import check_pause_note
from ..stores.control import require_control
from ..stores.values import MAX_TEXT
from ..zones import zone_name

if TYPE_CHECKING:
    from ..registry import Job, Registry
    from ..stores import LockState, LockStore

__all__ = ["checked_override", "effective_trigger", "jitter_delay", "missed_ticks", "pause", "resume",
           "set_schedule"]

logger = logging.getLogger("mutexcron.control")


def checked_override(job_name: str, spec: object, zone: str | tzinfo | None, *,
                     jitter: timedelta = timedelta(0)) -> tuple[str, str | None]:
    """A schedule override as the store keeps it: the spec, parsed to prove it (CronSpecError, also when its
    ticks are not further apart than the job's ``jitter``), and the zone name. Nothing is written before this
    passes."""
    if not isinstance(spec, str):
        raise CronSpecError(f"job {job_name!r}: a schedule must be a cron string, not {spec!r}")
    if len(spec.strip()) > MAX_TEXT:
        raise CronSpecError(f"job {job_name!r}: a schedule of {len(spec.strip())} characters is longer than "
                            f"the {MAX_TEXT} a store keeps")
    check_jitter(job_name, parse_cron(spec, job_name=job_name), jitter, error=CronSpecError, what="new schedule")
    return spec.strip(), zone_name(zone, job_name=job_name)


def effective_trigger(job: Job, state: LockState | None, default_zone: tzinfo) -> CronTrigger:
    """The trigger a job fires on: the store's override if it has one, else the code's spec. An override
    without a zone uses the job's zone (or the scheduler's)."""
    if state is None or state.schedule is None:
        return job.trigger(default_zone)
    spec = parse_cron(state.schedule, job_name=job.name)
    zone = job.timezone or default_zone
    if state.schedule_timezone is not None:
        zone = resolve_timezone(state.schedule_timezone, subject=f"job {job.name!r}: schedule timezone")
    return CronTrigger(spec, zone)


def missed_ticks(job: Job, state: LockState | None, trigger: CronTrigger, *, now: datetime,
                 before: datetime | None = None) -> list[datetime]:
    """The ticks of ``trigger`` to catch up at ``now``, oldest first, by ``job.catch_up``: those after the
    lock's last fire and after any pause ended, within ``job.catch_up_window`` of ``now`` and before
    ``before`` (default: up to ``now``). None if the job is paused, never ran, or does not catch up."""
    if job.catch_up == "skip" or state is None or state.last_fire_time is None or state.is_paused(now):
        return []
    ended = state.pause_ended_at(now)
    # Strictly after the floor: the last fire ran, and a tick at the very moment a pause ended was refused.
    floor = max(state.last_fire_time, ended or state.last_fire_time, now - job.catch_up_window)
    # A tick still waiting out its jitter on the instances that fired it is not missed yet.
    ticks = takewhile(lambda tick: tick + jitter_delay(job.name, tick, job.jitter) <= now
                      and (before is None or tick < before), iter_fire_times(trigger, floor))
    chosen = list(ticks)
    return chosen[-1:] if job.catch_up == "latest" else chosen


def jitter_delay(job_name: str, fire_time: datetime, jitter: timedelta) -> timedelta:
    """How long after ``fire_time`` the tick runs: the same amount in ``[0, jitter)`` on every instance,
    from a hash of the job name and the fire time (whole milliseconds)."""
    total = int(jitter.total_seconds() * 1000)
    if total <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{job_name}@{fire_time.astimezone(UTC).isoformat()}".encode()).digest()
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % total)


# -- operator actions on a store, for Scheduler's methods and the command lines -----------------------------

def pause(store: LockStore, registry: Registry, name: str, *, until: datetime | None = None,
          by: str | None = None, note: str | None = None) -> LockState:
    """Pause job ``name`` fleet-wide (see :meth:`mutexcron.Scheduler.pause`)."""
    controls = require_control(store, f"pause job {name!r}")
    if until is not None and (not isinstance(until, datetime) or until.utcoffset() is None):
        raise ValueError(f"pause {name!r}: until={until!r} must be an aware datetime or None")
    by = _by(by)
    if until is not None and until <= store.now():  # it would pause nothing, and hide ticks from catch-up
        raise ValueError(f"pause {name!r}: until={until.isoformat()} has already passed on the store's clock")
    try:
        note = check_pause_note(note)
    except ValueError as error:
        raise ValueError(f"pause {name!r}: {error}") from None
    state = _on_known(store, registry, name, lambda: controls.pause(name, until=until, by=by, note=note))
    logger.warning("job %r paused%s%s%s", name, f" by {state.paused_by}" if state.paused_by else "",
                   f" until {state.paused_until.isoformat()}" if state.paused_until else "",
                   f": {state.pause_note}" if state.pause_note else "")
    return state


def resume(store: LockStore, registry: Registry, name: str) -> LockState:
    """Lift job ``name``'s pause fleet-wide (see :meth:`mutexcron.Scheduler.resume`)."""
    controls = require_control(store, f"resume job {name!r}")
    state = _on_known(store, registry, name, lambda: controls.resume(name))
    logger.warning("job %r resumed", name)
    return state


def set_schedule(store: LockStore, registry: Registry, name: str, spec: str | None, *,
                 timezone: str | tzinfo | None = None, by: str | None = None) -> LockState:
    """Override job ``name``'s schedule fleet-wide, or with ``spec=None`` go back to the code's."""
    controls = require_control(store, f"{'set' if spec is not None else 'reset'} the schedule of job {name!r}")
    if spec is None:
        if timezone is not None:
            raise CronSpecError(f"job {name!r}: a timezone needs a schedule; reset_schedule() takes none")
        zone = None
    else:
        spread = registry.get(name).jitter if name in registry else timedelta(0)  # undeclared here: unknown
        spec, zone = checked_override(name, spec, timezone, jitter=spread)
    by = _by(by)
    state = _on_known(store, registry, name, lambda: controls.set_schedule(name, spec, timezone=zone, by=by))
    logger.warning("job %r schedule %s (version %d)", name,
                   f"set to {spec!r}" + (f" in {zone}" if zone else "") if spec is not None else "reset to the code's",
                   state.schedule_version)
    return state


def _by(by: object) -> str | None:
    if by is not None and (not isinstance(by, str) or not by.strip() or len(by) > MAX_TEXT):
        raise ValueError(f"by={by!r} must be a non-empty string of at most {MAX_TEXT} characters (who made "
                         "the change) or None")
    return by


def _on_known(store: LockStore, registry: Registry, name: str,
              change: Callable[[], LockState | None]) -> LockState:
    """``change()`` on a job the store knows; a declared job the store has not seen yet is seeded first."""
    state = change()
    if state is None and name in registry:
        store.seed([name])
        state = change()
    if state is None:
        raise UnknownJobError(f"the lock store {store!r} has no job named {name!r}")
    return state

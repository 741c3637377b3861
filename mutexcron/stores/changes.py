"""The control verbs as pure functions of a job's lock document: each takes the document as the store holds it (a
deleted one included, None for none) and the store's now, and gives the document to write (the same object: write
nothing) with the verb's answer. :meth:`ControlStore.update` applies one atomically, so every store shares them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from .base import AcquireStatus, Acquisition, LockState, Renewal
from .values import check_definition, check_incident, check_pause_note

__all__ = ["Change", "acquire", "claim_next", "close_incident", "define", "delete", "force_unlock", "fresh",
           "live_slot", "open_incident", "pause", "record_failure", "release", "renew", "reserved", "resume",
           "revive", "set_schedule", "stop_asked", "take_over"]

T = TypeVar("T")
# (the document or None, the store's now) -> (the document to write, or the same one for no write; the answer)
Change = Callable[[LockState | None, datetime], tuple[LockState | None, T]]


def fresh(name: str, now: datetime) -> LockState:
    """A new, never locked document, made at ``now``."""
    return LockState(name, False, None, None, None, None, None, 0, created_at=now)


def revive(name: str) -> Change[bool]:
    """Create a missing document or revive a deleted one (its token, last fire time and pause kept): seed's step.
    True if it did either."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, bool]:
        if state is None:
            return fresh(name, now), True
        return (replace(state, deleted=False), True) if state.deleted else (state, False)

    return apply


def _visible(state: LockState | None) -> bool:
    return state is not None and not state.deleted


def _on_visible(change: Callable[[LockState, datetime], LockState]) -> Change[LockState | None]:
    """``change`` applied to a visible document, answering the new document; None (nothing written) without one."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, LockState | None]:
        if state is None or state.deleted:
            return state, None
        changed = change(state, now)
        if changed is state:
            return state, state
        written = replace(changed, revision=state.revision + 1)  # the document as the write leaves it
        return written, written

    return apply


def force_unlock() -> Change[bool]:
    """Free the lock whoever holds it; True if it was locked."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, bool]:
        if state is None or not state.locked:
            return state, False
        return replace(state, locked=False, lock_until=now, last_released_at=now, tick_token=0), True

    return apply


def delete() -> Change[bool]:
    """Hide a visible document (token, last fire time and lease kept); True if one was visible."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, bool]:
        if state is None or state.deleted:
            return state, False
        return replace(state, deleted=True), True

    return apply


def pause(*, until: datetime | None, by: str | None, note: str | None) -> Change[LockState | None]:
    """Refuse every acquire from now until resume() or ``until``."""
    note = check_pause_note(note)
    end = until.astimezone(UTC) if until is not None else None
    return _on_visible(lambda state, now: replace(
        state, paused=True, paused_at=now, paused_until=end, paused_by=by, pause_note=note))


def resume() -> Change[LockState | None]:
    """Lift a pause; a pause whose ``until`` passed ended then, not now (ticks after it are missed, not paused)."""
    def lift(state: LockState, now: datetime) -> LockState:
        if not state.paused:
            return state
        ended = state.pause_ended_at(now) or now
        return replace(state, paused=False, paused_at=None, paused_until=None, paused_by=None, pause_note=None,
                       resumed_at=ended)

    return _on_visible(lift)


def record_failure(*, pause_after: int | None, by: str | None, note: str | None) -> Change[tuple[int, bool]]:
    """Count one more failed run and, with ``pause_after``, pause the job once the count reaches it (if it is not
    paused): ``(failures, True)`` only for the call that paused it."""
    note = check_pause_note(note)

    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, tuple[int, bool]]:
        if state is None or state.deleted:
            return state, (0, False)
        failures = state.failures + 1
        pausing = pause_after is not None and failures >= pause_after and not state.is_paused(now)
        counted = replace(state, failures=failures)
        if pausing:
            counted = replace(counted, paused=True, paused_at=now, paused_until=None, paused_by=by, pause_note=note)
        return counted, (failures, pausing)

    return apply


def set_schedule(spec: str | None, *, timezone: str | None, by: str | None) -> Change[LockState | None]:
    """Override the schedule (None: back to the code's) and bump the version, so older fires are refused."""
    return _on_visible(lambda state, now: replace(
        state, schedule=spec, schedule_timezone=timezone, schedule_version=state.schedule_version + 1,
        schedule_by=by, schedule_changed_at=now))


def define(name: str, definition: str | None, *, by: str | None) -> Change[LockState | None]:
    """Keep a run-time schedule's definition (creating or reviving the document, clearing any override), or with
    None remove it (hiding a visible document). Either bumps the schedule version."""
    if definition is not None:
        check_definition(definition)

    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, LockState | None]:
        if definition is None and not _visible(state):
            return state, None
        base = state if state is not None else fresh(name, now)
        if definition is not None:  # a new definition clears the override; a removal keeps it
            base = replace(base, schedule=None, schedule_timezone=None)
        changed = replace(base, definition=definition, schedule_version=base.schedule_version + 1, schedule_by=by,
                          schedule_changed_at=now, deleted=definition is None,
                          revision=state.revision + 1 if state is not None else 1)  # as the write leaves it
        return changed, changed

    return apply


def open_incident(incident: str, *, replacing: str | None) -> Change[bool]:
    """Open ``incident`` if the open one is ``replacing`` (None: none is open); True only for the call that did."""
    check_incident(incident)
    return _turn_incident(replacing if replacing is None else check_incident(replacing), incident)


def close_incident(incident: str) -> Change[bool]:
    """Close ``incident`` if it is the open one; True only for the call that closed it."""
    return _turn_incident(check_incident(incident), None)


def _turn_incident(current: str | None, new: str | None) -> Change[bool]:
    """The visible document's incident from ``current`` to ``new`` (opened now), if it is ``current``."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, bool]:
        if state is None or state.deleted or state.incident != current:
            return state, False
        return replace(state, incident=new, incident_at=now if new is not None else None), True

    return apply


def live_slot(state: LockState, now: datetime) -> datetime | None:
    """The tick the overlap slot holds while it is live (claimed less than its lease ago, for a tick not yet
    taken), else None: every store's acquire refuses other ticks BUSY while it is."""
    fire, until = state.next_fire, state.next_until
    if fire is None or until is None or until <= now or (
            state.last_fire_time is not None and fire <= state.last_fire_time):
        return None
    return fire


def claim_next(*, fire_time: datetime, lease: timedelta, replace_running: bool) -> Change[bool]:
    """Make ``fire_time`` the tick the overlap slot holds, live for ``lease``; with ``replace_running``, overwrite an
    earlier tick and ask the live lock's holder to stop (docs/overlap.md)."""
    fire = fire_time.astimezone(UTC)

    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, bool]:
        if state is None or state.deleted or (state.last_fire_time is not None and fire <= state.last_fire_time):
            return state, False
        slot = live_slot(state, now)
        if slot is not None and slot != fire and not (replace_running and slot < fire):
            return state, False
        stop = state.token if replace_running and state.is_held(now) else state.stop_token
        return replace(state, next_fire=fire, next_until=now + lease, stop_token=stop), True

    return apply


def stop_asked(state: LockState | None, token: int) -> Renewal:
    """What a renewed holder of ``token`` is told: STOP when claim_next(replace) asked it to stop."""
    return Renewal.STOP if state is not None and state.stop_token == token else Renewal.RENEWED


def take_over(*, tick_token: int, owner: str, lease: timedelta,
              schedule_version: int | None) -> Change[Acquisition]:
    """Hand the run the acquire of ``tick_token`` began to ``owner`` under a new token (ControlStore.take_over)."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, Acquisition]:
        if state is None or state.deleted or not state.locked or state.tick_token != tick_token:
            return state, Acquisition(AcquireStatus.ALREADY_RAN, holder=state.locked_by if state else None)
        refusal = None
        if state.is_paused(now):
            refusal = Acquisition(AcquireStatus.PAUSED, holder=state.locked_by)
        elif schedule_version is not None and schedule_version != state.schedule_version:
            refusal = Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=state.schedule_version)
        if refusal is not None:
            if state.token != tick_token:
                return state, refusal
            # no one took it over yet: released unrun, so that the job is not held until the lease runs out
            return replace(state, locked=False, lock_until=now, last_released_at=now, tick_token=0), refusal
        if state.token != tick_token and state.is_held(now):
            return state, Acquisition(AcquireStatus.BUSY, holder=state.locked_by)
        token = state.token + 1
        return (replace(state, locked_by=owner, lock_until=now + lease, token=token),
                Acquisition(AcquireStatus.ACQUIRED, token=token))

    return apply


def reserved(state: LockState, lease: timedelta, now: datetime) -> bool:
    """A run a task worker took over and never released is kept for its tick's retry until ``lease`` after its
    lease ran out: an acquire with ``lease`` finds it busy."""
    return (state.locked and state.tick_token not in (0, state.token) and state.lock_until is not None
            and state.lock_until + lease > now)


def acquire(name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
            schedule_version: int | None) -> Change[Acquisition]:
    """LockStore.acquire as a function of the document (the memory store's, and the rule every store's follows)."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, Acquisition]:
        current = state if state is not None else fresh(name, now)
        refusal = _refusal(current, now, lease, fire_time, schedule_version)
        if refusal is not None:
            return current, refusal
        token = current.token + 1
        taken = replace(current, locked=True, locked_by=owner, last_locked_at=now, lock_until=now + lease,
                        last_fire_time=fire_time.astimezone(UTC) if fire_time is not None else current.last_fire_time,
                        token=token, tick_token=token, next_fire=None, next_until=None, deleted=False)
        return taken, Acquisition(AcquireStatus.ACQUIRED, token=token)

    return apply


def _refusal(state: LockState, now: datetime, lease: timedelta, fire_time: datetime | None,
             schedule_version: int | None) -> Acquisition | None:
    """Why an acquire is refused, in the contract's order (paused, stale schedule, already ran, busy), or None."""
    if state.is_paused(now):
        return Acquisition(AcquireStatus.PAUSED, holder=state.locked_by)
    if schedule_version is not None and schedule_version != state.schedule_version:
        return Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=state.schedule_version)
    if fire_time is not None and state.last_fire_time is not None and state.last_fire_time >= fire_time:
        return Acquisition(AcquireStatus.ALREADY_RAN, holder=state.locked_by)
    slot = live_slot(state, now)
    if state.is_held(now) or (slot is not None and slot != fire_time) or reserved(state, lease, now):
        return Acquisition(AcquireStatus.BUSY, holder=state.locked_by)
    return None


def renew(*, token: int, lease: timedelta) -> Change[bool]:
    """Extend the lease to now + ``lease`` if ``token`` holds the lock."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, bool]:
        if state is None or not state.locked or state.token != token:
            return state, False
        return replace(state, lock_until=now + lease), True

    return apply


def release(*, token: int, hold_at_least: timedelta, outcome: str | None, error: str | None) -> Change[bool]:
    """Release the lock if ``token`` holds it (kept until it was taken + ``hold_at_least``), with the run's outcome;
    ``error`` as check_outcome() gave it."""
    def apply(state: LockState | None, now: datetime) -> tuple[LockState | None, bool]:
        if state is None or not state.locked or state.token != token or state.last_locked_at is None:
            return state, False
        hold_until = state.last_locked_at + hold_at_least
        held = hold_until > now
        released = replace(state, locked=held, lock_until=hold_until if held else now, last_released_at=now,
                           tick_token=0)
        if outcome is not None:
            succeeded = outcome == "succeeded"
            released = replace(released, last_outcome=outcome, last_finished_at=now, last_error=error,
                               last_success_at=now if succeeded else state.last_success_at,
                               failures=0 if succeeded else state.failures)
        return released, True

    return apply

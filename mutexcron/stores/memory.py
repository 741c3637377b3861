"""A lock store inside one process: for tests, development and single-instance apps."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from .base import (
    AcquireStatus,
    Acquisition,
    ControlStore,
    LockState,
    LockStore,
    OverlapStore,
    Renewal,
    TakeOverStore,
    check_definition,
    check_incident,
    check_outcome,
    check_pause_note,
)

__all__ = ["MemoryLockStore"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _reserved(state: LockState, lease: timedelta, now: datetime) -> bool:
    """A run a task worker took over and never released is kept for its tick's retry until ``lease`` after its
    lease ran out: an acquire with ``lease`` finds it busy (TakeOverStore)."""
    return (state.locked and state.tick_token not in (0, state.token) and state.lock_until is not None
            and state.lock_until + lease > now)


class MemoryLockStore(LockStore, ControlStore, OverlapStore, TakeOverStore):
    """Locks in a dict guarded by a mutex. ``clock`` replaces the store's clock (tests move time by hand).

    A deleted lock stays in the dict as a tombstone (its name in ``_deleted``), hidden from readers, so its
    token, last fire time and lease survive until a seed or an acquire revives it."""

    def __init__(self, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._clock = clock
        self._mutex = threading.Lock()
        self._locks: dict[str, LockState] = {}
        self._deleted: set[str] = set()
        self._next: dict[str, tuple[datetime, datetime]] = {}  # the overlap slot: (tick, live until)
        self._stop: dict[str, int] = {}  # the token whose holder is asked to stop (on_busy="replace")

    @classmethod
    def from_url(cls, url: str) -> MemoryLockStore:
        return cls()

    def _fresh(self, name: str) -> LockState:
        return LockState(name, False, None, None, None, None, None, 0, created_at=self._clock())

    def seed(self, names: Iterable[str]) -> int:
        with self._mutex:
            missing = [name for name in dict.fromkeys(names) if name not in self._locks or name in self._deleted]
            for name in missing:
                if name not in self._locks:
                    self._locks[name] = self._fresh(name)
                self._deleted.discard(name)
            return len(missing)

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        with self._mutex:
            now = self._clock()
            if name not in self._locks:
                self._locks[name] = self._fresh(name)
            state = self._locks[name]
            if state.is_paused(now):
                return Acquisition(AcquireStatus.PAUSED, holder=state.locked_by)
            if schedule_version is not None and schedule_version != state.schedule_version:
                return Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=state.schedule_version)
            if fire_time is not None and state.last_fire_time is not None and state.last_fire_time >= fire_time:
                return Acquisition(AcquireStatus.ALREADY_RAN, holder=state.locked_by)
            slot = self._live_slot(state, now)
            if state.is_held(now) or (slot is not None and slot != fire_time) or _reserved(state, lease, now):
                return Acquisition(AcquireStatus.BUSY, holder=state.locked_by)
            self._next.pop(name, None)
            self._deleted.discard(name)  # taking a tombstone revives it, with its token and last fire time
            token = state.token + 1
            self._locks[name] = replace(
                state,
                locked=True,
                locked_by=owner,
                last_locked_at=now,
                lock_until=now + lease,
                last_fire_time=fire_time.astimezone(UTC) if fire_time is not None else state.last_fire_time,
                token=token,
                tick_token=token,
            )
            return Acquisition(AcquireStatus.ACQUIRED, token=token)

    def take_over(self, name: str, *, tick_token: int, owner: str, lease: timedelta,
                  schedule_version: int | None = None) -> Acquisition:
        with self._mutex:
            now, state = self._clock(), self._locks.get(name)
            if state is None or name in self._deleted or not state.locked or state.tick_token != tick_token:
                return Acquisition(AcquireStatus.ALREADY_RAN, holder=state.locked_by if state else None)
            refusal = None
            if state.is_paused(now):
                refusal = Acquisition(AcquireStatus.PAUSED, holder=state.locked_by)
            elif schedule_version is not None and schedule_version != state.schedule_version:
                refusal = Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=state.schedule_version)
            if refusal is not None:
                if state.token == tick_token:  # no one took it over: released unrun
                    self._locks[name] = replace(state, locked=False, lock_until=now, last_released_at=now,
                                                tick_token=0)
                return refusal
            if state.token != tick_token and state.is_held(now):
                return Acquisition(AcquireStatus.BUSY, holder=state.locked_by)
            token = state.token + 1
            self._locks[name] = replace(state, locked_by=owner, lock_until=now + lease, token=token)
            return Acquisition(AcquireStatus.ACQUIRED, token=token)

    def _live_slot(self, state: LockState, now: datetime) -> datetime | None:
        """The tick the document's overlap slot holds while it is live (OverlapStore), else None."""
        fire, until = self._next.get(state.name, (None, now))
        if fire is None or until <= now or (state.last_fire_time is not None and fire <= state.last_fire_time):
            return None
        return fire

    def claim_next(self, name: str, *, fire_time: datetime, lease: timedelta, replace: bool = False) -> bool:
        fire = fire_time.astimezone(UTC)
        with self._mutex:
            state, now = self._locks.get(name), self._clock()
            if state is None or name in self._deleted or (
                    state.last_fire_time is not None and fire <= state.last_fire_time):
                return False
            slot = self._live_slot(state, now)
            if slot is not None and slot != fire and not (replace and slot < fire):
                return False
            self._next[name] = (fire, now + lease)
            if replace and state.is_held(now):
                self._stop[name] = state.token
            return True

    def renew_watching(self, name: str, *, token: int, lease: timedelta) -> Renewal:
        with self._mutex:
            if not self._renew(name, token, lease):
                return Renewal.LOST
            return Renewal.STOP if self._stop.get(name) == token else Renewal.RENEWED

    def _holding(self, name: str, token: int) -> LockState | None:
        state = self._locks.get(name)
        return state if state is not None and state.locked and state.token == token else None

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        with self._mutex:
            return self._renew(name, token, lease)

    def _renew(self, name: str, token: int, lease: timedelta) -> bool:
        state = self._holding(name, token)
        if state is None:
            return False
        self._locks[name] = replace(state, lock_until=self._clock() + lease)
        return True

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        error = check_outcome(outcome, error)
        with self._mutex:
            state = self._holding(name, token)
            if state is None:
                return False
            now = self._clock()
            assert state.last_locked_at is not None
            hold_until = state.last_locked_at + hold_at_least
            held = hold_until > now
            ran = {} if outcome is None else {
                "last_outcome": outcome, "last_finished_at": now, "last_error": error,
                "last_success_at": now if outcome == "succeeded" else state.last_success_at,
                "failures": 0 if outcome == "succeeded" else state.failures}
            self._locks[name] = replace(state, locked=held, lock_until=hold_until if held else now,
                                        last_released_at=now, tick_token=0, **ran)  # type: ignore[arg-type]
            return True

    def locks(self) -> list[LockState]:
        with self._mutex:
            return [self._locks[name] for name in sorted(self._locks) if name not in self._deleted]

    def lock(self, name: str) -> LockState | None:
        with self._mutex:
            return None if name in self._deleted else self._locks.get(name)

    def force_unlock(self, name: str) -> bool:
        with self._mutex:
            state = self._locks.get(name)
            if state is None or not state.locked:
                return False
            now = self._clock()
            self._locks[name] = replace(state, locked=False, lock_until=now, last_released_at=now, tick_token=0)
            return True

    def delete(self, name: str) -> bool:
        with self._mutex:
            if name not in self._locks or name in self._deleted:
                return False
            self._deleted.add(name)
            return True

    def _change(self, name: str, change: Callable[[LockState, datetime], LockState]) -> LockState | None:
        """Apply ``change`` to a visible document atomically; None if there is none."""
        with self._mutex:
            state = self._locks.get(name)
            if state is None or name in self._deleted:
                return None
            self._locks[name] = change(state, self._clock())
            return self._locks[name]

    def pause(self, name: str, *, until: datetime | None = None, by: str | None = None,
              note: str | None = None) -> LockState | None:
        note = check_pause_note(note)
        return self._change(name, lambda state, now: replace(
            state, paused=True, paused_at=now, paused_until=until.astimezone(UTC) if until else None, paused_by=by,
            pause_note=note))

    def resume(self, name: str) -> LockState | None:
        def resume(state: LockState, now: datetime) -> LockState:
            if not state.paused:
                return state
            ended = state.pause_ended_at(now) or now  # a pause whose until passed ended then
            return replace(state, paused=False, paused_at=None, paused_until=None, paused_by=None, pause_note=None,
                           resumed_at=ended)

        return self._change(name, resume)

    def record_failure(self, name: str, *, pause_after: int | None = None, by: str | None = None,
                       note: str | None = None) -> tuple[int, bool]:
        note = check_pause_note(note)
        paused = False

        def count(state: LockState, now: datetime) -> LockState:
            nonlocal paused
            state = replace(state, failures=state.failures + 1)
            paused = pause_after is not None and state.failures >= pause_after and not state.is_paused(now)
            return replace(state, paused=True, paused_at=now, paused_until=None, paused_by=by,
                           pause_note=note) if paused else state

        state = self._change(name, count)
        return (0, False) if state is None else (state.failures, paused)

    def set_schedule(self, name: str, spec: str | None, *, timezone: str | None = None,
                     by: str | None = None) -> LockState | None:
        return self._change(name, lambda state, now: replace(
            state, schedule=spec, schedule_timezone=timezone, schedule_version=state.schedule_version + 1,
            schedule_by=by, schedule_changed_at=now))

    def define(self, name: str, definition: str | None, *, by: str | None = None) -> LockState | None:
        if definition is not None:
            check_definition(definition)
        with self._mutex:
            if definition is None and (name not in self._locks or name in self._deleted):
                return None
            state = self._locks.get(name) or self._fresh(name)
            if definition is not None:  # a new definition clears the override; a removal keeps it
                state = replace(state, schedule=None, schedule_timezone=None)
            self._locks[name] = replace(state, definition=definition, schedule_version=state.schedule_version + 1,
                                        schedule_by=by, schedule_changed_at=self._clock())
            if definition is None:
                self._deleted.add(name)  # hidden as delete() hides it, token and last fire time kept
            else:
                self._deleted.discard(name)
            return self._locks[name]

    def open_incident(self, name: str, incident: str, *, replacing: str | None = None) -> bool:
        check_incident(incident)
        if replacing is not None:
            check_incident(replacing)
        opened: list[bool] = []

        def open_(state: LockState, now: datetime) -> LockState:
            if state.incident != replacing:  # None: only while no incident is open
                return state
            opened.append(True)
            return replace(state, incident=incident, incident_at=now)

        self._change(name, open_)
        return bool(opened)

    def close_incident(self, name: str, incident: str) -> bool:
        check_incident(incident)
        closed: list[bool] = []

        def close(state: LockState, now: datetime) -> LockState:
            if state.incident != incident:
                return state
            closed.append(True)
            return replace(state, incident=None, incident_at=None)

        self._change(name, close)
        return bool(closed)

    def now(self) -> datetime:
        return self._clock()

    def __repr__(self) -> str:
        return f"<MemoryLockStore locks={len(self._locks) - len(self._deleted)}>"

"""The control plane a full store adds to the lock (tests/contract.py proves it): three primitives (read one document,
list them, and one compare-and-set write), on which every control verb is built once (mutexcron.stores.changes).

A store with it also keeps, in its :meth:`LockStore.acquire`, what must be atomic with taking a lock and lives in the
same document: a pause, the schedule version, the overlap slot and a task worker's take-over (docs/architecture.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime, timedelta
from typing import TypeVar

from ..errors import ControlNotSupported, StoreUnavailable
from . import changes
from .base import Acquisition, LockState, LockStore, Renewal

__all__ = ["UPDATE_ATTEMPTS", "ControlStore", "require_control", "supports_control"]

T = TypeVar("T")

# How many times update() reads and writes again when another write came between. Every acquire, renewal and
# release writes the document too, and the instances of a fleet may change one document at once (each opening the
# same incident, or counting failures): each round one writer wins, so the bound is many rounds, never reached.
UPDATE_ATTEMPTS = 100


class ControlStore(ABC):
    """Reading, listing and changing lock documents (``class MyStore(LockStore, ControlStore)``): pauses, schedule
    overrides, run-time schedules, alerts' incidents, failure counts, the overlap slot and task-worker take-overs
    (docs/fleet-control.md). Three methods are abstract; each raises StoreUnavailable as LockStore's do."""

    @abstractmethod
    def read(self, name: str) -> LockState | None:
        """One job's document as stored, a deleted one included (``deleted`` set), or None if there is none."""

    @abstractmethod
    def locks(self) -> list[LockState]:
        """Every visible (not deleted) document, sorted by name."""

    @abstractmethod
    def write(self, state: LockState, *, revision: int) -> bool:
        """Compare and set, in one atomic step: store ``state`` whole as the document of ``state.name`` (every field
        but ``revision``, which becomes ``revision + 1``) if that document's revision is ``revision`` (a missing
        one's is 0: it is created). True if written; False, changing nothing, otherwise. Every other write of a
        store (seed's revival, acquire, renew, release) bumps the revision too."""

    def update(self, name: str, change: changes.Change[T]) -> T:
        """Apply ``change`` to the document of ``name`` atomically: read, change on the store's clock, write if
        nothing wrote between (else again), and give the change's answer."""
        assert isinstance(self, LockStore), "a ControlStore is a LockStore too (its clock)"
        for _ in range(UPDATE_ATTEMPTS):
            state = self.read(name)
            changed, answer = change(state, self.now())
            if changed is state or changed is None:
                return answer
            if self.write(changed, revision=state.revision if state is not None else 0):
                return answer
        raise StoreUnavailable(f"{self!r}: the document of {name!r} changed under {UPDATE_ATTEMPTS} tries to update it")

    def lock(self, name: str) -> LockState | None:
        """One job's document, or None if it has none (or it was deleted)."""
        state = self.read(name)
        return None if state is None or state.deleted else state

    def force_unlock(self, name: str) -> bool:
        """Free the lock whoever holds it (an operator's action). True if it was locked."""
        return self.update(name, changes.force_unlock())

    def delete(self, name: str) -> bool:
        """Hide a job's document (an orphan's), keeping its token, last fire time and any live lease, so that tokens
        never repeat and a tick never runs twice. True if a visible document was there."""
        return self.update(name, changes.delete())

    def pause(self, name: str, *, until: datetime | None = None, by: str | None = None,
              note: str | None = None) -> LockState | None:
        """Refuse every acquire of ``name`` from now (store clock) until :meth:`resume` or ``until`` (aware), with
        ``by`` and the operator's ``note``; a running body is not touched. The new document, or None (nothing
        changed) without a visible one."""
        return self.update(name, changes.pause(until=until, by=by, note=note))

    def resume(self, name: str) -> LockState | None:
        """Lift a pause, setting ``resumed_at`` (no catch-up of ticks before it). The new document, or None."""
        return self.update(name, changes.resume())

    def record_failure(self, name: str, *, pause_after: int | None = None, by: str | None = None,
                       note: str | None = None) -> tuple[int, bool]:
        """Count one more failed (or timed-out) run and, with ``pause_after``, pause the job once the count reaches
        it: ``(failures, paused)``, ``paused`` True only for the one call that paused it (the fleet's one alert);
        ``(0, False)`` without a visible document. A succeeded release resets the count."""
        return self.update(name, changes.record_failure(pause_after=pause_after, by=by, note=note))

    def set_schedule(self, name: str, spec: str | None, *, timezone: str | None = None,
                     by: str | None = None) -> LockState | None:
        """Override the job's schedule with ``spec`` (None: the code's) and bump ``schedule_version``, so acquires
        fired for the old one are refused. The caller validates the spec. The new document, or None."""
        return self.update(name, changes.set_schedule(spec, timezone=timezone, by=by))

    def define(self, name: str, definition: str | None, *, by: str | None = None) -> LockState | None:
        """Keep a run-time schedule's ``definition`` (JSON, :func:`check_definition`): create or revive the document
        (token, last fire time and pause kept), clear any override, bump the version. ``None`` removes it: the
        version bumped and a visible document hidden (None without one). The document it left."""
        return self.update(name, changes.define(name, definition, by=by))

    def open_incident(self, name: str, incident: str, *, replacing: str | None = None) -> bool:
        """Open ``incident`` if no incident is open or, with ``replacing``, if that one is; True only for the one
        call that did (the fleet's one alert)."""
        return self.update(name, changes.open_incident(incident, replacing=replacing))

    def close_incident(self, name: str, incident: str) -> bool:
        """Close ``incident`` if it is the open one; True only for the one call that did (the one "recovered")."""
        return self.update(name, changes.close_incident(incident))

    def claim_next(self, name: str, *, fire_time: datetime, lease: timedelta, replace: bool = False) -> bool:
        """Make ``fire_time`` the tick of the overlap slot (``on_busy="buffer_one"``, ``"replace"``), live for
        ``lease``: True if it now is (the slot was empty or dead, held this tick, or with ``replace`` an earlier one,
        whose live lock's holder is then asked to stop). False when the tick was taken, another (later) tick holds
        a live slot, or there is no visible document. While the slot is live, every store's acquire refuses BUSY
        all but an acquire fired for its tick, which empties it."""
        return self.update(name, changes.claim_next(fire_time=fire_time, lease=lease, replace_running=replace))

    def renew_watching(self, name: str, *, token: int, lease: timedelta) -> Renewal:
        """:meth:`LockStore.renew`, also saying (STOP) whether a ``claim_next(replace=True)`` asked the holder of
        ``token`` to stop."""
        assert isinstance(self, LockStore)
        if not self.renew(name, token=token, lease=lease):
            return Renewal.LOST
        return changes.stop_asked(self.read(name), token)

    def take_over(self, name: str, *, tick_token: int, owner: str, lease: timedelta,
                  schedule_version: int | None = None) -> Acquisition:
        """Hand the run that the acquire of ``tick_token`` began to a task worker, ``owner`` (``run_on="tasks"``): a
        new token (``tick_token`` kept), a lease of ``lease``. Taken when the document's ``tick_token`` is
        ``tick_token`` and its token still is (handed on) or the taker before ran out of lease.

        Refused, in this order: ALREADY_RAN (the run was released, force-unlocked or the lock taken since, or no
        visible document), PAUSED, STALE_SCHEDULE, BUSY (another taker's lease is live). A PAUSED or STALE_SCHEDULE
        refusal of a run no one took over yet releases it unrun."""
        return self.update(name, changes.take_over(tick_token=tick_token, owner=owner, lease=lease,
                                                   schedule_version=schedule_version))


def supports_control(store: LockStore) -> bool:
    """True if ``store`` has the control plane (pauses, schedules, alerts, listings, overlap policies, task
    workers' take-overs): it is a :class:`ControlStore`."""
    return isinstance(store, ControlStore)


def require_control(store: LockStore, operation: str) -> ControlStore:
    """``store`` as a ControlStore, or :class:`~mutexcron.errors.ControlNotSupported` naming it and ``operation``."""
    if not isinstance(store, ControlStore):
        raise ControlNotSupported(store, operation)
    return store

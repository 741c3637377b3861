"""The two store contracts (tests/contract.py has them as tests): :class:`LockStore`, the lock every store
implements, and :class:`ControlStore`, the control plane a full store adds.

One lock document per job. Acquiring is a single atomic compare-and-set decided on the *store's*
clock, so instances with skewed clocks agree on lease expiry. The document also remembers the last
nominal fire time it was acquired for, which makes each tick run at most once across the fleet. A store with
a control plane also keeps what operators set at run time (a pause, a schedule override with its version:
docs/fleet-control.md) and the open alert, and lists and reads its documents.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeVar

from .._common import duration_ms, epoch_ms, ms_to_datetime
from ..errors import ControlNotSupported, StoreUnavailable
from .values import (
    FAILING,
    MAX_DEFINITION,
    MAX_ERROR_LINE,
    MAX_INCIDENT,
    MAX_PAUSE_NOTE,
    OUTCOMES,
    check_definition,
    check_incident,
    check_outcome,
    check_pause_note,
)

__all__ = ["FAILING", "MAX_DEFINITION", "MAX_ERROR_LINE", "MAX_INCIDENT", "MAX_PAUSE_NOTE", "OUTCOMES",
           "AcquireRequest", "AcquireStatus", "Acquisition", "ControlStore", "LockState", "LockStore", "OverlapStore",
           "ReleaseRequest", "Renewal", "TakeOverStore", "check_definition", "check_incident", "check_outcome",
           "check_pause_note", "datetime_to_ms", "duration_ms", "ms_to_datetime", "require_control", "supports_control",
           "supports_overlap", "supports_take_over"]

datetime_to_ms = epoch_ms  # the stores' name for it (Redis keeps times as epoch milliseconds)


@dataclass(frozen=True)
class LockState:
    """A job's lock document as the store holds it; datetimes are aware UTC or ``None``."""

    name: str
    locked: bool
    locked_by: str | None
    last_locked_at: datetime | None
    last_released_at: datetime | None
    lock_until: datetime | None
    last_fire_time: datetime | None
    token: int
    # The token of the acquire whose run holds the lock, kept when a task worker takes the run over (token then
    # grows, tick_token stays); 0 once released. TakeOverStore.take_over needs it to tell that run from any other.
    tick_token: int = 0
    paused: bool = False  # set by pause(), cleared by resume(); see is_paused() for ``until``
    paused_at: datetime | None = None  # when pause() was last called (store clock)
    paused_until: datetime | None = None  # the pause ends by itself then (None: until resume())
    paused_by: str | None = None
    pause_note: str | None = None  # the operator's note given to pause() (at most MAX_PAUSE_NOTE characters)
    resumed_at: datetime | None = None  # when resume() lifted the last pause: no catch-up of ticks before it
    schedule: str | None = None  # the operator's cron spec overriding the code's (None: the code's)
    schedule_timezone: str | None = None  # the override's IANA zone (None: the job's or the scheduler's)
    schedule_version: int = 0  # bumped by every set_schedule(); acquires fired for another one are refused
    schedule_by: str | None = None
    schedule_changed_at: datetime | None = None
    # What the runs left behind, for alerts (mutexcron.ops.alerts): written by release(outcome=...), atomically.
    created_at: datetime | None = None  # when the document was first made (kept across delete and revive)
    last_outcome: str | None = None  # "succeeded", "failed" or "timed_out": the latest run released with an outcome
    last_finished_at: datetime | None = None  # when that run was released (store clock)
    last_success_at: datetime | None = None  # when the latest succeeded run was released (store clock)
    last_error: str | None = None  # the failed run's error, one line (at most MAX_ERROR_LINE characters)
    failures: int = 0  # failed (or timed-out) runs in a row: record_failure() counts them, a succeeded release resets
    incident: str | None = None  # the open alert ("overdue ..." or "failing ..."), claimed by one instance
    incident_at: datetime | None = None  # when it was opened (store clock)
    definition: str | None = None  # a run-time schedule's definition, JSON (None: a declared job's document)

    def is_held(self, now: datetime) -> bool:
        """True if the lock is taken and its lease (or hold_at_least) has not run out at ``now``."""
        return self.locked and self.lock_until is not None and self.lock_until > now

    def is_paused(self, now: datetime) -> bool:
        """True if acquires are refused at ``now``: paused, and its ``until`` (if any) not reached."""
        return self.paused and (self.paused_until is None or self.paused_until > now)

    def pause_ended_at(self, now: datetime) -> datetime | None:
        """The latest moment a pause ended (by resume() or by its ``until``) before ``now``; ticks up to it
        were skipped by the pause, never to be caught up."""
        ends = [self.resumed_at] if self.resumed_at is not None else []
        if self.paused and self.paused_until is not None and self.paused_until <= now:
            ends.append(self.paused_until)
        return max(ends, default=None)


class AcquireStatus(StrEnum):
    ACQUIRED = "acquired"
    BUSY = "busy"  # held by a live lease
    ALREADY_RAN = "already_ran"  # this fire time (or a later one) was already taken
    PAUSED = "paused"  # an operator paused the job (refused for scheduled and manual runs alike)
    STALE_SCHEDULE = "stale_schedule"  # fired for a schedule version the store no longer has


@dataclass(frozen=True)
class Acquisition:
    """The result of :meth:`LockStore.acquire`: the fencing token if acquired."""

    status: AcquireStatus
    token: int | None = None
    holder: str | None = None  # who holds the lock when BUSY, if the store says
    schedule_version: int | None = None  # the store's version when STALE_SCHEDULE

    @property
    def acquired(self) -> bool:
        return self.status is AcquireStatus.ACQUIRED


@dataclass(frozen=True)
class AcquireRequest:
    """The arguments of one :meth:`LockStore.acquire`, for :meth:`LockStore.acquire_many`."""

    name: str
    owner: str
    lease: timedelta
    fire_time: datetime | None
    schedule_version: int | None = None


@dataclass(frozen=True)
class ReleaseRequest:
    """The arguments of one :meth:`LockStore.release`, for :meth:`LockStore.release_many`."""

    name: str
    token: int
    hold_at_least: timedelta = timedelta(0)
    outcome: str | None = None
    error: str | None = None


class LockStore(ABC):
    """The lock contract: where job locks live. Every method raises :class:`~mutexcron.errors.StoreUnavailable`
    when the store cannot be reached, so callers can fail closed. Five methods are abstract (seed, acquire,
    renew, release, now); a store that is only this runs every job once per tick, without the control plane
    (:class:`ControlStore`: pauses, schedule overrides, catch-up, alerts, listings)."""

    # The application database (a Django alias) whose tables hold this store's locks, or None (another server):
    # where a framework seeds lock rows after its migrations and runs its database checks, without isinstance.
    database_alias: str | None = None

    @abstractmethod
    def seed(self, names: Iterable[str]) -> int:
        """Create a lock document for each name that has none (reviving a deleted one with its token and last
        fire time); never reset one. Returns how many were created or revived."""

    @abstractmethod
    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        """Take the lock if it is free (or its lease ran out) and, when ``fire_time`` is given, only if no
        fire at or after ``fire_time`` took it before. ``fire_time=None`` is a manual run: it neither
        checks nor moves the last fire time. A missing document is created; a deleted one is revived by an
        acquire that takes it.

        Refused, in this order: PAUSED while :meth:`LockState.is_paused` on the store's clock (any run);
        STALE_SCHEDULE when ``schedule_version`` is given (a manual run too: a run-time schedule's) and differs
        from the document's, a deleted one's included (a removed run-time schedule); then ALREADY_RAN and BUSY as
        above. A refusal changes nothing (a deleted document stays deleted). A store without a control
        plane has no pauses and no schedule versions: it ignores ``schedule_version`` and answers only
        ACQUIRED, ALREADY_RAN and BUSY."""

    # True: acquire_many() asks for all its locks in one round trip (the scheduler then asks for the locks of the
    # jobs due at one instant together); False: it asks one by one, and the scheduler asks in parallel threads.
    batches_acquires: bool = False

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
        """Each request as :meth:`acquire` would answer it, in order: each atomic on its own (not all or none),
        and a request the store could not be asked for is its StoreUnavailable (never raised: what was taken
        before the error must reach its caller). This default asks one by one."""
        return _each(requests, lambda request: self.acquire(
            request.name, owner=request.owner, lease=request.lease, fire_time=request.fire_time,
            schedule_version=request.schedule_version))

    @abstractmethod
    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        """Extend the lease to store-now + ``lease`` if ``token`` still holds the lock."""

    @abstractmethod
    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        """Release the lock if ``token`` holds it; with ``hold_at_least``, keep it until the acquisition
        time plus that duration. With ``outcome`` (one of OUTCOMES), in the same atomic step:
        ``last_outcome``, ``last_finished_at`` = now, ``last_error`` (``error``, None on success) and, on
        success, ``last_success_at`` = now. Returns False (and changes nothing) for a stale token. A store
        without a control plane keeps no outcomes (they serve alerts) and may ignore ``outcome`` and ``error``."""

    # True: release_many() sends all its releases in one round trip (the scheduler then gives back together the
    # locks of bodies that end at once); False: it releases one by one, and each body's thread releases its own.
    batches_releases: bool = False

    def release_many(self, requests: Sequence[ReleaseRequest]) -> list[bool | StoreUnavailable]:
        """Each request as :meth:`release` would answer it, in order, each atomic on its own; a request the store
        could not be asked for is its StoreUnavailable (never raised). An outcome that release() refuses raises
        ValueError before anything is sent. This default releases one by one."""
        for request in requests:
            check_outcome(request.outcome, request.error)
        return _each(requests, lambda request: self.release(
            request.name, token=request.token, hold_at_least=request.hold_at_least, outcome=request.outcome,
            error=request.error))

    @abstractmethod
    def now(self) -> datetime:
        """The store's clock, aware UTC: the clock leases are decided on."""

    def ping(self) -> None:
        """Raise StoreUnavailable if the store cannot be reached."""
        self.now()

    def eviction_policy(self) -> str | None:
        """The server's policy for dropping keys when its memory is full (Redis's ``maxmemory-policy``), or None
        for a store that never evicts (or may not say): what ``check --deploy`` warns about (W003)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook; most stores hold a client pool
        """Release connections."""

    def __enter__(self) -> LockStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ControlStore(ABC):
    """The control plane, which a full store implements besides :class:`LockStore` (``class MyStore(LockStore,
    ControlStore)``): reading and listing lock documents, freeing and deleting them, pausing and re-timing jobs
    (docs/fleet-control.md), and the incidents of alerts. Every method raises StoreUnavailable as LockStore's do."""

    @abstractmethod
    def locks(self) -> list[LockState]:
        """Every lock document in the store (not the deleted ones), sorted by name."""

    @abstractmethod
    def lock(self, name: str) -> LockState | None:
        """One job's lock document, or ``None`` if it has none (or it was deleted)."""

    @abstractmethod
    def force_unlock(self, name: str) -> bool:
        """Free the lock whoever holds it (an operator's action). Returns True if it was locked."""

    @abstractmethod
    def delete(self, name: str) -> bool:
        """Hide a job's lock document (for orphans whose job no longer exists): a soft delete that keeps its
        token, last fire time and any live lease, so tokens never repeat and a tick never runs twice.
        Returns True if a visible document was there."""

    # -- run-time control by operators (docs/fleet-control.md) ---------------------------------------

    @abstractmethod
    def pause(self, name: str, *, until: datetime | None = None, by: str | None = None,
              note: str | None = None) -> LockState | None:
        """Refuse every acquire of ``name`` from now (store clock) until :meth:`resume` or ``until`` (aware);
        sets ``paused_at`` to now and keeps ``by`` and the operator's ``note`` (:func:`check_pause_note`). A running
        body is not touched. Returns the new state, or ``None`` (and changes nothing) if the store has no visible
        document for ``name``."""

    @abstractmethod
    def resume(self, name: str) -> LockState | None:
        """Lift a pause: clear the pause fields (its note too) and, if it was paused, set ``resumed_at`` to now
        (store clock). Returns the new state, or ``None`` if the store has no visible document for ``name``."""

    @abstractmethod
    def record_failure(self, name: str, *, pause_after: int | None = None, by: str | None = None,
                       note: str | None = None) -> tuple[int, bool]:
        """Count one more failed (or timed-out) run of ``name`` in ``failures``, and with ``pause_after`` pause the
        job (as ``pause(by=by, note=note)``) once the count reaches it, if it is not paused: one atomic step.
        ``(failures, paused)``: ``paused`` True only for the one call that paused it (the fleet's one alert).
        ``(0, False)``, changing nothing, without a visible document. ``release(outcome="succeeded")`` resets
        ``failures`` to 0."""

    @abstractmethod
    def set_schedule(self, name: str, spec: str | None, *, timezone: str | None = None,
                     by: str | None = None) -> LockState | None:
        """Override the job's schedule with ``spec`` (``None`` with ``timezone=None``: back to the code's) and
        bump ``schedule_version``, so acquires fired for the old schedule are refused. The caller validates
        the spec. Returns the new state, or ``None`` if the store has no visible document for ``name``."""

    @abstractmethod
    def define(self, name: str, definition: str | None, *, by: str | None = None) -> LockState | None:
        """Store a run-time schedule's ``definition`` (JSON text, see :func:`check_definition`) in one atomic step:
        create the document or revive a deleted one (token, last fire time, pause and created_at kept), set the
        definition, bump ``schedule_version``, clear any schedule override and set ``schedule_by`` = ``by`` and
        ``schedule_changed_at`` = now. Returns the new state.

        ``definition=None`` removes the schedule: on a visible document, it clears the definition, bumps the
        version (acquires fired for the old one are refused STALE_SCHEDULE), sets ``schedule_by`` and
        ``schedule_changed_at``, and hides the document as :meth:`delete` does (token and last fire time kept).
        Returns the state it left, or ``None`` (changing nothing) if there is no visible document."""

    # -- alerts: one instance claims each incident (mutexcron.ops.alerts) ------------------------------------

    @abstractmethod
    def open_incident(self, name: str, incident: str, *, replacing: str | None = None) -> bool:
        """Set ``incident`` and ``incident_at`` = now if the visible document has no open incident or, with
        ``replacing``, if its open incident is exactly ``replacing`` (the job's condition changed: the incident
        turns into ``incident``, opened anew). True only for the one call that did it (the fleet's one alert);
        False, changing nothing, otherwise."""

    @abstractmethod
    def close_incident(self, name: str, incident: str) -> bool:
        """Clear the document's incident if it is ``incident``. True only for the one call that closed it
        (the fleet's one "recovered"); False, changing nothing, otherwise."""


class Renewal(StrEnum):
    """What :meth:`OverlapStore.renew_watching` found."""

    RENEWED = "renewed"
    STOP = "stop"  # renewed, and a newer tick asked this holder to stop (on_busy="replace")
    LOST = "lost"  # the token no longer holds the lock: nothing renewed


class OverlapStore(ABC):
    """The overlap policies' state (``on_busy="buffer_one"`` and ``"replace"``, docs/overlap.md), which a store adds
    besides :class:`LockStore`: on each lock document, one *next tick* slot and a *stop request* to its holder.

    A store with it also keeps the slot in :meth:`LockStore.acquire`: while a live slot holds a tick, every acquire
    but one fired for that tick is refused BUSY (after the refusals PAUSED, STALE_SCHEDULE and ALREADY_RAN), so
    that no other tick overtakes it; the acquire that takes the lock empties the slot. A slot is live until its
    ``lease`` from its last claim runs out, and while its tick is later than the document's last fire time."""

    @abstractmethod
    def claim_next(self, name: str, *, fire_time: datetime, lease: timedelta, replace: bool = False) -> bool:
        """Make ``fire_time`` the tick the slot holds, live for ``lease`` from now (store clock), in one atomic
        step. True if the slot is now this tick's: it was empty or dead, or held this tick (its lease renewed), or,
        with ``replace``, held an earlier tick (overwritten); with ``replace`` the holder of a live lock is then
        asked to stop (its :meth:`renew_watching` answers STOP). False, changing nothing, when ``fire_time`` is at or
        before the last fire time (the tick was taken) or a live slot holds another tick (with ``replace``: a
        later one). A missing or deleted document is refused (False)."""

    @abstractmethod
    def renew_watching(self, name: str, *, token: int, lease: timedelta) -> Renewal:
        """:meth:`LockStore.renew`, also saying (STOP) whether a ``claim_next(replace=True)`` asked the holder of
        ``token`` to stop."""


class TakeOverStore(ABC):
    """A run handed to a task worker (``run_on="tasks"``): the worker takes the lock over under a token of its own,
    so that a worker that stalled and lost the run can neither renew nor release it (docs/run-on-tasks.md).

    A store with it writes ``tick_token`` (:class:`LockState`): every acquire sets it to its new token, every
    release and force-unlock clears it (0)."""

    @abstractmethod
    def take_over(self, name: str, *, tick_token: int, owner: str, lease: timedelta,
                  schedule_version: int | None = None) -> Acquisition:
        """Hand the run that the acquire of ``tick_token`` began to ``owner``, in one atomic step on the store's
        clock: a new token (the document's + 1; ``tick_token`` kept), ``locked_by`` = ``owner``, a lease of
        ``lease`` from now. Taken when the document's ``tick_token`` is ``tick_token`` and either its token still is
        ``tick_token`` (the acquirer handed it on, lease live or not) or the lease of the holder that took it over
        ran out (that holder died or stalled).

        Refused, in this order: ALREADY_RAN when the document's ``tick_token`` is another (the run was released,
        force-unlocked, or the lock taken by another run since), or there is no visible document; PAUSED while
        paused; STALE_SCHEDULE when ``schedule_version`` is given and differs from the document's; BUSY while
        another taker's lease is live (``holder`` names it). A PAUSED or STALE_SCHEDULE refusal of a run no one
        took over yet also releases it unrun, so that the job is not held until the lease runs out; any other
        refusal changes nothing."""


def supports_take_over(store: LockStore) -> bool:
    """True if ``store`` can hand a run to a task worker: it is a :class:`TakeOverStore`."""
    return isinstance(store, TakeOverStore)


def supports_overlap(store: LockStore) -> bool:
    """True if ``store`` keeps the overlap policies' state fleet-wide: it is an :class:`OverlapStore`."""
    return isinstance(store, OverlapStore)


def supports_control(store: LockStore) -> bool:
    """True if ``store`` has the control plane (pauses, schedules, alerts, listings): it is a :class:`ControlStore`."""
    return isinstance(store, ControlStore)


def require_control(store: LockStore, operation: str) -> ControlStore:
    """``store`` as a ControlStore, or :class:`~mutexcron.errors.ControlNotSupported` naming it and ``operation``."""
    if not isinstance(store, ControlStore):
        raise ControlNotSupported(store, operation)
    return store


_Request = TypeVar("_Request")
_Answer = TypeVar("_Answer")


def _each(requests: Sequence[_Request], ask: Callable[[_Request], _Answer]) -> list[_Answer | StoreUnavailable]:
    """Each request's answer in order, one at a time; one the store could not be asked for is its StoreUnavailable
    (kept, not raised, so that the answers before it reach the caller)."""
    answers: list[_Answer | StoreUnavailable] = []
    for request in requests:
        try:
            answers.append(ask(request))
        except StoreUnavailable as error:
            answers.append(error)
    return answers

"""The lock contract (tests/contract.py has it as tests): :class:`LockStore`, which every store implements, and
:class:`LockState`, a job's lock document (mutexcron.stores.control adds the control plane on it).

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
from ..errors import StoreUnavailable
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
           "AcquireRequest", "AcquireStatus", "Acquisition", "LockState", "LockStore", "ReleaseRequest", "Renewal",
           "check_definition", "check_incident", "check_outcome", "check_pause_note", "datetime_to_ms", "duration_ms",
           "ms_to_datetime"]

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
    # grows, tick_token stays); 0 once released. ControlStore.take_over needs it to tell that run from any other.
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
    # The overlap policies' slot (docs/overlap.md): the next tick, live until next_until while later than the last
    # fire time (changes.live_slot), and the token whose holder is asked to stop (on_busy="replace").
    next_fire: datetime | None = None
    next_until: datetime | None = None
    stop_token: int = 0
    deleted: bool = False  # hidden (a soft delete): ControlStore.read shows it, lock() and locks() do not
    revision: int = 0  # bumped by every write: ControlStore.write compares it (0: a document never written since made)

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


class Renewal(StrEnum):
    """What :meth:`ControlStore.renew_watching` found."""

    RENEWED = "renewed"
    STOP = "stop"  # renewed, and a newer tick asked this holder to stop (on_busy="replace")
    LOST = "lost"  # the token no longer holds the lock: nothing renewed


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

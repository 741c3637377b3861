"""A fire is one value: one tick of one job on this instance, with the schedule version it was fired on and the
scheduler generation it belongs to. The executor makes it when APScheduler hands a tick over (run_now and run_tick
make one too, and a catch-up one per missed tick); it then goes one way: acquire (alone or batched), the body
under the heartbeats, release, then the listeners, telemetry and alerts (:mod:`mutexcron.scheduling.runs`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from time import monotonic
from typing import TYPE_CHECKING

from ..records import JobContext, Outcome, RunRecord
from ..stores import AcquireRequest

if TYPE_CHECKING:
    from ..registry import Job
    from .lifecycle import Generation

__all__ = ["DueFire", "Fire", "FireKind", "Gate", "HandOff", "Leave", "Skip"]

HandOff = Callable[[Callable[[], None]], bool]  # WorkerPool.submit: False once the pool takes no more calls


@dataclass(frozen=True)
class Skip:
    """A fire that is not run: the outcome to record (a skip) and why."""

    outcome: Outcome
    why: str


# Asked once the job's lock is won, before the body: None to run it, or the Skip to record instead (the lock is then
# released unrun). It may raise StoreUnavailable. A backfill claims its tick so.
Gate = Callable[[], Skip | None]


class FireKind(StrEnum):
    """Why a fire happens. Only a scheduled one is held to its job's ``start_deadline`` and takes the overlap slot
    (the others are late or out of turn by design); only scheduled and caught-up ones are on the tick ledger."""

    SCHEDULED = "scheduled"  # a tick of the job's schedule, fired on time (or run_tick)
    CATCH_UP = "catch_up"  # a missed tick caught up: waits out a busy lock, so that no later tick overtakes it
    BACKFILL = "backfill"  # a past tick of an operator's range: its own ledger, waits out the job's scheduled run
    MANUAL = "manual"  # run_now: outside the tick ledger, the lock taken whatever tick ran last


@dataclass(frozen=True)
class Fire:
    """One fire of ``job`` at the nominal ``time`` (UTC; for a manual run, when it was asked for)."""

    job: Job
    time: datetime
    version: int | None  # the schedule version it was fired on (None: not checked by the store)
    life: Generation  # the start-to-shutdown span it belongs to: its shutdown gate, heartbeats and pings
    kind: FireKind = FireKind.SCHEDULED
    gate: Gate | None = None  # what else must agree, once the lock is won, before the body runs
    made: float = field(default_factory=monotonic, compare=False)  # its lock was asked for no earlier

    @property
    def scheduled(self) -> bool:
        return self.kind is FireKind.SCHEDULED

    @property
    def manual(self) -> bool:
        return self.kind is FireKind.MANUAL

    @property
    def catch_up(self) -> bool:
        return self.kind is FireKind.CATCH_UP

    @property
    def backfill(self) -> bool:
        return self.kind is FireKind.BACKFILL

    @property
    def tick(self) -> datetime | None:
        """The tick the store counts as taken (None for a manual run or a backfill, which keeps its own ledger)."""
        return self.time if self.kind is FireKind.SCHEDULED or self.kind is FireKind.CATCH_UP else None

    def request(self, owner: str) -> AcquireRequest:
        """What to ask the store for, on behalf of ``owner`` (this instance's name)."""
        return AcquireRequest(self.job.name, owner, self.job.lease, self.tick, self.version)

    def context(self, owner: str, token: int) -> JobContext:
        """The body's context once the lock is won with ``token``."""
        return JobContext(self.job.name, self.time, owner, token, catch_up=self.catch_up, backfill=self.backfill,
                          _asked=self.made)


@dataclass(frozen=True)
class DueFire:
    """A tick APScheduler handed over, before it is made a :class:`Fire` (in a batch, at the flush: a tick missed by
    more than the misfire grace in a long pass is dropped then)."""

    name: str  # the job's
    run_time: datetime  # the tick, as APScheduler scheduled it
    version: int | None  # the schedule version of the trigger that fired it
    due: datetime  # when it was due: the tick plus its jitter


class Leave:
    """``life.leave()`` for one fire that entered its generation, once, however often it is called."""

    def __init__(self, life: Generation) -> None:
        self._unleft = [life]  # emptied by the first call: list.pop is atomic, and costs no lock per fire

    def __call__(self, record: RunRecord | None = None) -> None:
        try:
            life = self._unleft.pop()
        except IndexError:
            return
        life.leave()

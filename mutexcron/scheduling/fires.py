"""A fire is one value: one tick of one job on this instance, with the schedule version it was fired on and the
scheduler generation it belongs to. The executor makes it when APScheduler hands a tick over (run_now and run_tick
make one too, and a catch-up one per missed tick); it then goes one way: acquire (alone or batched), the body
under the heartbeats, release, then the listeners, telemetry and alerts (:mod:`mutexcron.scheduling.runs`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..records import JobContext, Outcome
from ..stores import AcquireRequest

if TYPE_CHECKING:
    from ..registry import Job
    from .lifecycle import Generation

__all__ = ["Fire", "Gate", "HandOff", "Leave"]

HandOff = Callable[[Callable[[], None]], bool]  # WorkerPool.submit: False once the pool takes no more calls
# Asked once the job's lock is won, before the body: None to run it, or the skip (outcome, why) to record instead
# (the lock is then released unrun). It may raise StoreUnavailable. A backfill claims its tick so.
Gate = Callable[[], tuple[Outcome, str] | None]


@dataclass(frozen=True)
class Fire:
    """One fire of ``job`` at the nominal ``time`` (UTC; for a manual run, when it was asked for)."""

    job: Job
    time: datetime
    version: int | None  # the schedule version it was fired on (None: not checked by the store)
    life: Generation  # the start-to-shutdown span it belongs to: its shutdown gate, heartbeats and pings
    manual: bool = False  # run_now: outside the tick ledger, the lock taken whatever tick ran last
    catch_up: bool = False  # a missed tick caught up
    backfill: bool = False  # a past tick run by Scheduler.backfill: like a manual run, outside the tick ledger
    gate: Gate | None = None  # what else must agree, once the lock is won, before the body runs

    @property
    def tick(self) -> datetime | None:
        """The tick the store counts as taken (None for a manual run or a backfill, which keeps its own ledger)."""
        return None if self.manual or self.backfill else self.time

    def request(self, owner: str) -> AcquireRequest:
        """What to ask the store for, on behalf of ``owner`` (this instance's name)."""
        return AcquireRequest(self.job.name, owner, self.job.lease, self.tick, self.version)

    def context(self, owner: str, token: int) -> JobContext:
        """The body's context once the lock is won with ``token``."""
        return JobContext(self.job.name, self.time, owner, token, catch_up=self.catch_up, backfill=self.backfill)


class Leave:
    """``life.leave()`` for one fire that entered its generation, once, however often it is called."""

    def __init__(self, life: Generation) -> None:
        self._unleft = [life]  # emptied by the first call: list.pop is atomic, and costs no lock per fire

    def __call__(self) -> None:
        try:
            life = self._unleft.pop()
        except IndexError:
            return
        life.leave()

"""What the scheduler hands APScheduler: triggers that carry their schedule version (and a test's clock
skew), and the executor that passes each fire's scheduled time and version on, delaying jittered ticks."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from apscheduler.executors.base import BaseExecutor
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger

from .fire_batch import FireBatch, FireMany

if TYPE_CHECKING:
    from .lifecycle import WorkerPool

__all__ = ["Fire", "LockingExecutor", "ShiftedTrigger", "VersionedTrigger", "run_by_locking_executor"]

# fire(job name, scheduled run time, schedule version or None, when it was due to run)
Fire = Callable[[str, datetime, "int | None", datetime], None]


class ShiftedTrigger(BaseTrigger):
    """Fires as an instance whose clock is off by ``skew`` would: nominal time t fires at real t - skew."""

    def __init__(self, trigger: BaseTrigger, skew: timedelta) -> None:
        self.trigger, self.skew = trigger, skew

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        previous = previous_fire_time + self.skew if previous_fire_time is not None else None
        fire = self.trigger.get_next_fire_time(previous, now + self.skew)
        return fire - self.skew if fire is not None else None

    def __str__(self) -> str:
        return f"{self.trigger} skewed by {self.skew}"


class VersionedTrigger(BaseTrigger):
    """A trigger tagged with the store's schedule version it was built from: each fire carries it to the
    acquire, which refuses a version the store no longer has (the schedule changed meanwhile)."""

    def __init__(self, trigger: BaseTrigger, version: int) -> None:
        self.trigger, self.version = trigger, version

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        return self.trigger.get_next_fire_time(previous_fire_time, now)

    def __str__(self) -> str:
        return f"{self.trigger} (schedule version {self.version})"


def run_by_locking_executor(*args: object) -> None:
    """The function APScheduler holds for each job; LockingExecutor runs the job itself instead."""
    raise RuntimeError("mutexcron jobs run through the scheduler's own executor")


class LockingExecutor(BaseExecutor):
    """An APScheduler executor that hands each fire, with its scheduled time and schedule version, to the
    scheduler's ``fire`` in the generation's worker pool (which shutdown closes and joins with a deadline).

    APScheduler's own executors call the job function without the scheduled time; we need that time
    because (job name, scheduled time) is the identity of a run across the fleet. A tick that ``delay``
    says to run later (jitter) becomes a one-off date job of the same scheduler, so no thread waits for it.
    A fire that ``batched(name)`` says may go with others goes to ``fire_many`` through a :class:`FireBatch`.
    """

    def __init__(self, fire: Fire, pool: WorkerPool, delay: Callable[[str, datetime], timedelta], *,
                 fire_many: FireMany | None = None, batched: Callable[[str], bool] = lambda name: False) -> None:
        super().__init__()
        self._fire = fire
        self._pool = pool
        self._delay = delay
        self._batched = batched
        self._batch = FireBatch(pool, fire_many) if fire_many is not None else None

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        due = run_times[-1]
        if job.args:  # a jittered tick's delayed run: the original job's name, run time and version
            name, run_time, version = job.args
        else:
            name, run_time, version = job.id, due, getattr(job.trigger, "version", None)
            delay = self._delay(name, run_time)
            if delay > timedelta(0):
                self._scheduler.add_job(run_by_locking_executor, trigger=DateTrigger(run_date=run_time + delay),
                                        args=(name, run_time, version), name=f"{name} (jittered)",
                                        misfire_grace_time=None)
                self._run_job_success(job.id, [])
                return

        if self._batch is not None and self._batched(name):
            self._batch.add((name, run_time, version, due), lambda: self._run_job_success(job.id, []))
            return

        def run() -> None:
            try:
                self._fire(name, run_time, version, due)
            finally:
                self._run_job_success(job.id, [])

        if not self._pool.submit(run):
            self._run_job_success(job.id, [])

    def shutdown(self, wait: bool = True) -> None:
        """Nothing to do: the scheduler's Generation closes the pool and joins it within its deadline."""

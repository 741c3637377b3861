"""Where APScheduler hands a fire over: :class:`LockingExecutor` makes it a :class:`~.fires.Fire` (or drops
it: missed by more than the misfire grace, no longer declared, the scheduler shutting down), delays a jittered tick,
and runs it in the generation's worker pool, alone or batched with the fires due with it
(:mod:`mutexcron.scheduling.batch`), through :class:`~mutexcron.scheduling.runs.Runs`."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from apscheduler.executors.base import BaseExecutor
from apscheduler.triggers.date import DateTrigger

from ..ops.control import jitter_delay
from .batch import FireBatch, fire_together
from .fires import DueFire, Fire

if TYPE_CHECKING:
    from ..registry import Job
    from .catchup import CatchUps
    from .lifecycle import Generation, WorkerPool
    from .options import SchedulerOptions
    from .runs import Runs

__all__ = ["LockingExecutor", "run_by_locking_executor"]

logger = logging.getLogger("mutexcron.scheduler")


def run_by_locking_executor(*args: object) -> None:
    """The function APScheduler holds for each job; LockingExecutor runs the job itself instead."""
    raise RuntimeError("mutexcron jobs run through the scheduler's own executor")


class LockingExecutor(BaseExecutor):
    """An APScheduler executor that makes each fire a :class:`Fire` of generation ``life``, with its scheduled
    time and schedule version, and runs it in ``pool`` (which shutdown closes and joins with a deadline).

    APScheduler's own executors call the job function without the scheduled time; we need that time
    because (job name, scheduled time) is the identity of a run across the fleet. A jittered tick becomes a
    one-off date job of the same scheduler, so no thread waits for it. A fire that ``batched(name)`` says may go
    with others goes through a :class:`FireBatch`; any other through its job's catch-up while one runs.
    """

    def __init__(self, life: Generation, pool: WorkerPool, options: SchedulerOptions, runs: Runs,
                 catch_ups: CatchUps, *, batched: Callable[[Job], bool] = lambda job: False) -> None:
        super().__init__()
        self._life, self._pool, self._options = life, pool, options
        self._runs, self._catch_ups, self._batched = runs, catch_ups, batched
        # The fires of one pass of the scheduler's loop, asked for together (a PassingScheduler says when it ends).
        self.batch = FireBatch(pool, functools.partial(fire_together, runs=runs, fire_context=options.fire_context))

    def submit_job(self, job: Any, run_times: list[datetime]) -> None:
        """Hand a fire over without APScheduler's count of each job's runs in flight: the store decides whether
        fires overlap (APScheduler's ``max_instances`` does not apply), and the count took the executor's lock
        twice a fire."""
        self._do_submit_job(job, run_times)

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        due = run_times[-1]
        declared = self._declared(job.args[0] if job.args else job.id)
        if job.args:  # a jittered tick's delayed run: the original job's name, run time and version
            name, run_time, version = job.args
        else:
            name, run_time, version = job.id, due, getattr(job.trigger, "version", None)
            delay = self._jitter(declared, run_time)
            if delay > timedelta(0):
                self._scheduler.add_job(run_by_locking_executor, trigger=DateTrigger(run_date=run_time + delay),
                                        args=(name, run_time, version), name=f"{name} (jittered)",
                                        misfire_grace_time=None)
                return

        if declared is not None and self._batched(declared):
            self.batch.add(DueFire(name, run_time, version, due), self._make)
            return

        def run() -> None:
            fire = self._make(DueFire(name, run_time, version, due))
            if fire is not None:
                self._alone(fire)

        self._pool.submit(run)

    def shutdown(self, wait: bool = True) -> None:
        """Nothing to do: the scheduler's Generation closes the pool and joins it within its deadline."""

    def _make(self, due_fire: DueFire) -> Fire | None:
        """The fire of a tick handed over, entered in its generation (``life.leave()`` once it is over), or None:
        missed by more than the misfire grace, no longer declared, or the scheduler is shutting down."""
        options, name, run_time, version, due = (self._options, due_fire.name, due_fire.run_time, due_fire.version,
                                                 due_fire.due)
        fire_time = (run_time + options.clock_skew).astimezone(UTC)
        late = datetime.now(UTC) - due
        if late > options.misfire_grace_time:
            logger.warning("job %r: fire %s missed by %s (misfire_grace_time %s); not run", name,
                           fire_time.isoformat(), late, options.misfire_grace_time)
            return None
        try:
            job = options.jobs.get(name)
        except KeyError:
            logger.warning("job %r fired but is no longer declared", name)
            return None
        if not self._life.enter():
            logger.debug("job %r: fire %s dropped: the scheduler is shutting down", name, fire_time.isoformat())
            return None
        return Fire(job, fire_time, version, self._life)

    def _alone(self, fire: Fire) -> None:
        """A fire that is not batched, in this worker thread: while its job catches up, its catch-up runs it
        after the missed ticks (mutexcron.scheduling.catchup); else it runs now."""
        try:
            with self._options.fire_context():
                if fire.job.catch_up == "skip" or not self._catch_ups.run(fire.life, fire.job, fire):
                    self._runs.execute(fire)
        finally:
            fire.life.leave()

    def _declared(self, name: str) -> Job | None:
        try:
            return self._options.jobs.get(name)
        except KeyError:  # no longer declared: _make says so
            return None

    def _jitter(self, job: Job | None, run_time: datetime) -> timedelta:
        if job is None or not job.jitter:
            return timedelta(0)
        return jitter_delay(job.name, (run_time + self._options.clock_skew).astimezone(UTC), job.jitter)

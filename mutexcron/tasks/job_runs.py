"""The worker side of ``run_on="tasks"``: a task of type :data:`TASK_TYPE` runs one tick's body under its lock.

The scheduler instance that wins a tick's lock keeps the lock and enqueues one task (its id from the job name and
the fire time, :func:`tick_task_id`) carrying the tick and the lock's fencing token (:class:`JobTask`). A worker
with a :class:`JobRunner` registered on its queue renews the lock with that token before it runs the body (a
refused renewal means the lock is no longer the tick's: the body is not run), heartbeats it while the body runs,
then releases it with the outcome, which the alerts read. A worker that dies mid-body leaves the lock held: the
task comes back after its visibility timeout and the retry renews with the same token. See ``docs/jobs.md``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import StoreUnavailable
from ..listeners import Listener, Listeners
from ..ops.failures import count_failure
from ..ops.heartbeats import Heartbeats
from ..ops.pings import Pings
from ..ops.run_limits import BodyEnd
from ..records import Outcome, RunRecord
from ..registry import Job, Registry, default_registry
from ..scheduling.runtime import ScheduleDefinition
from ..stores import LockStore, require_control, store_from_url, supports_control
from ..telemetry import build_telemetry
from .backends.base import TaskBackend
from .handlers import Handler
from .job_tasks import TASK_TYPE, JobTask, tick_task_id
from .queue import TaskQueue

__all__ = ["TASK_TYPE", "JobRunner", "JobTask", "declared_or_stored", "tick_task_id"]

logger = logging.getLogger("mutexcron.tasks.jobs")

# What a task's result says once its body ran (or was refused: "not_run").
FINISHED = ("succeeded", "failed", "timed_out")


def declared_or_stored(registry: Registry, store: LockStore) -> Callable[[str], Job]:
    """A lookup of the jobs a worker runs: one declared in ``registry``, else a run-time schedule that ``store``
    defines (``Scheduler.add_schedule``), built as every instance builds it; UnknownJobError otherwise."""
    def lookup(name: str) -> Job:
        if name in registry:
            return registry.get(name)
        state = require_control(store, "find a run-time schedule").lock(name) if supports_control(store) else None
        if state is None or state.definition is None:
            return registry.get(name)  # UnknownJobError naming the declared jobs
        return ScheduleDefinition.from_json(state.definition).job(name, registry)

    return lookup


class JobRunner:
    """Runs the bodies of ``run_on="tasks"`` jobs in a task worker; :meth:`register` it on the worker's queue.

    ``store``: the jobs' lock store (the schedulers' one: a URL or a LockStore); ``lookup(name) -> Job`` finds a
    job (default: :func:`declared_or_stored` on the default registry and the store; raise for an unknown one);
    ``instance_id``: this worker's name in run records (default ``host:pid``). Listeners (:meth:`add_listener`)
    get a ``"started"`` and a ``"finished"`` RunRecord of each body as a scheduler's do; ``metrics`` /
    ``tracing`` as the Scheduler's.
    """

    def __init__(self, store: str | LockStore, *, lookup: Callable[[str], Job] | None = None,
                 instance_id: str | None = None, metrics: bool = False, tracing: bool = False) -> None:
        self._owns_store = not isinstance(store, LockStore)
        self.store = store_from_url(store)
        self.lookup = lookup if lookup is not None else declared_or_stored(default_registry, self.store)
        self._instance_id = instance_id
        self.telemetry = build_telemetry(metrics=metrics, tracing=tracing)
        self.listeners = Listeners()
        self._heartbeats = Heartbeats(self.store)
        self._pings = Pings()  # the jobs' ping_url, after each body this worker ran
        self._results: TaskBackend | None = None
        self._visibility = timedelta(minutes=5)
        self._warned: set[str] = set()  # jobs whose lease was found shorter than the visibility timeout

    @property
    def instance_id(self) -> str:
        return self._instance_id or f"{socket.gethostname()}:{os.getpid()}"

    def add_listener(self, callback: Listener, *, events: Collection[str] = ("finished",)) -> Listener:
        """Call ``callback(record)`` for each body this worker runs (``"finished"``; ``"started"`` if asked)."""
        return self.listeners.add(callback, events)

    def register(self, queue: TaskQueue, *, max_attempts: int = 5,
                 visibility_timeout: timedelta = timedelta(minutes=5)) -> None:
        """Run :data:`TASK_TYPE` tasks of ``queue``'s workers with this runner. ``visibility_timeout``: how soon the
        task of a worker that died mid-body runs again; ``max_attempts``: how many such deaths it survives."""
        queue.handlers.add(Handler(TASK_TYPE, self.run, max_attempts=max_attempts,
                                   visibility_timeout=visibility_timeout))
        self._results, self._visibility = queue.backend, visibility_timeout

    def close(self) -> None:
        self._heartbeats.stop(timeout=5)
        self._pings.stop(time.monotonic() + 5)
        if self._owns_store:
            self.store.close()

    # -- one task ---------------------------------------------------------------------------------

    def run(self, payload: object) -> None:
        """Run the tick a task carries, once: a task whose body already ran (its result says so) is not run again;
        a StoreUnavailable is raised (the task is tried again later, the lock still the tick's)."""
        task = JobTask.from_payload(payload)
        earlier = self._result(task)
        if earlier.get("outcome") in FINISHED and earlier.get("token") == task.token:
            logger.info("job %r (tick %s): task %s already ran its body (%s); not run again", task.job_name,
                        task.fire_time.isoformat(), task.task_id, earlier["outcome"])
            self._release(task, earlier.get("hold"), earlier["outcome"], earlier.get("error"))
            return
        try:
            job = self.lookup(task.job_name)
        except StoreUnavailable:
            raise  # reading a run-time schedule's definition failed: tried again later
        except Exception as error:
            self._not_run(task, None, f"job {task.job_name!r} is not declared in worker {self.instance_id}: {error}")
            return
        self._check_lease(job)
        started_at = datetime.now(UTC)
        if not self.store.renew(job.name, token=task.token, lease=job.lease):  # StoreUnavailable: tried again later
            self._not_run(task, job, f"the lock of job {job.name!r} is no longer held by tick "
                                     f"{task.fire_time.isoformat()} (token {task.token}): it was force-unlocked, or "
                                     "its lease ran out and another run took it; not run (raise the job's lease "
                                     "above the queue wait?)")
            return
        self._run_body(job, task, started_at)

    def _run_body(self, job: Job, task: JobTask, started_at: datetime) -> None:
        ctx = task.context(self.instance_id)
        beat = self._heartbeats.add(job, ctx)
        if self.listeners.wants("started"):
            self.listeners.notify(task.record(self.instance_id, None, started_at), "started")
        if job.ping_url is not None:  # <url>/start from where the body runs
            self._pings.ping(job.ping_url, "start")
        end = BodyEnd()  # the job's timeout holds here too: the heartbeat tells the body to stop
        try:
            with self.telemetry.body(job, ctx):
                job.call(ctx)
        except Exception as raised:
            end.raised(raised)
        finally:
            if beat is not None:
                self._heartbeats.remove(beat)
        outcome, error = end.verdict(job, beat, logger, f"tick {task.fire_time.isoformat()}, task {task.task_id}")
        hold = job.hold_at_least.total_seconds()
        # The result first: a worker that dies between the two leaves a task that, tried again, only releases.
        self._store_result(task, {"outcome": str(outcome), "error": error, "token": task.token, "hold": hold,
                                  "worker": self.instance_id})
        self._release(task, hold, str(outcome), error)
        if outcome in (Outcome.FAILED, Outcome.TIMED_OUT):
            count_failure(self.store, job, error, instance_id=self.instance_id, notify=self.listeners.notify)
        record = task.record(self.instance_id, outcome, started_at, finished_at=datetime.now(UTC), error=error,
                             lock_lost=ctx.lock_lost)
        if outcome is Outcome.SUCCEEDED:
            logger.info("job %r (tick %s) succeeded in task %s", job.name, task.fire_time.isoformat(), task.task_id)
        self._pings.send(job.ping_url, record)
        self._finish(record)

    def _check_lease(self, job: Job) -> None:
        """Warn (once per job) when a dead worker's task would come back after the lock's lease ran out: another
        tick may take the lock meanwhile, and the retry is then refused (the tick is not run)."""
        if job.lease < self._visibility and job.name not in self._warned:
            self._warned.add(job.name)
            logger.warning("job %r: its lease (%s) is shorter than the workers' visibility timeout (%s): the task of a "
                           "worker that dies mid-body comes back after the lock may have been taken by a later tick, "
                           "and is then not run; give the job a lease of at least the visibility timeout",
                           job.name, job.lease, self._visibility)

    def _not_run(self, task: JobTask, job: Job | None, why: str) -> None:
        """Fail closed: the body is not run; the reason is logged, kept as the task's result and recorded as a
        ``skipped_busy`` fire of the tick (a job this worker does not know also releases the tick's lock)."""
        logger.error("job %r (tick %s, task %s): %s", task.job_name, task.fire_time.isoformat(), task.task_id, why)
        self._store_result(task, {"outcome": "not_run", "error": why, "token": task.token,
                                  "worker": self.instance_id})
        if job is None:
            self._release(task, 0.0, str(Outcome.FAILED), why)
        now = datetime.now(UTC)
        self._finish(task.record(self.instance_id, Outcome.SKIPPED_BUSY, now, finished_at=now, error=why))

    def _finish(self, record: RunRecord) -> None:
        self.telemetry.finished(record)
        self.listeners.notify(record, "finished")

    def _release(self, task: JobTask, hold: object, outcome: str, error: object) -> None:
        seconds = float(hold) if isinstance(hold, int | float) else 0.0
        try:
            released = self.store.release(task.job_name, token=task.token, hold_at_least=timedelta(seconds=seconds),
                                          outcome=outcome, error=error if isinstance(error, str) else None)
        except StoreUnavailable as failure:
            logger.error("job %r: could not release its lock (it expires with its lease): %s", task.job_name, failure)
            return
        if not released:
            logger.debug("job %r: lock (token %d) no longer held at release", task.job_name, task.token)

    def _result(self, task: JobTask) -> dict[str, Any]:
        text = self._results.load_result(task.task_id) if self._results is not None else None
        try:
            found = json.loads(text) if text else {}
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    def _store_result(self, task: JobTask, result: dict[str, Any]) -> None:
        if self._results is None:
            return
        try:
            self._results.store_result(task.task_id, json.dumps(result, separators=(",", ":")))
        except StoreUnavailable as error:
            logger.warning("task %s: could not keep the outcome of job %r: %s", task.task_id, task.job_name, error)

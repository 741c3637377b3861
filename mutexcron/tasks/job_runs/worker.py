"""The worker side of ``run_on="tasks"``: a :class:`JobRunner` registered on a worker's queue runs each tick's body
under the lock it takes over from the tick token (:meth:`ControlStore.take_over`; refused: the body is not run)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from ...definitions import ScheduleDefinition
from ...errors import SchedulerConfigError, StoreUnavailable
from ...listeners import Listener, Listeners
from ...records import JobContext, Outcome, RunRecord
from ...registry import Job, Registry, default_registry
from ...running.body import BodyKit, Reports, run_body
from ...running.heartbeats import Beat, Heartbeats
from ...running.pings import Pings
from ...stores import (
    AcquireStatus,
    ControlStore,
    LockStore,
    require_control,
    store_from_url,
    supports_control,
)
from ...telemetry import build_telemetry
from ..backends.base import TaskBackend
from ..handlers import Handler
from ..model import RetryLater, decode_result, encode_result
from ..queue import TaskQueue
from .task import TASK_TYPE, JobTask

__all__ = ["JobRunner", "declared_or_stored"]

logger = logging.getLogger("mutexcron.tasks.jobs")

# What a task's result says once its body ran (or was refused: "not_run").
FINISHED = ("succeeded", "failed", "timed_out")
RESULT_RETRY = 0.2  # seconds between tries to keep a body's result while the store is down
# A refused take-over: the tick's skip and why.
_REFUSED = {
    AcquireStatus.PAUSED: (Outcome.SKIPPED_PAUSED, "the job is paused"),
    AcquireStatus.STALE_SCHEDULE: (Outcome.SKIPPED_STALE_SCHEDULE, "the schedule changed since this tick was "
                                                                   "enqueued; this tick of the old one is not run"),
    AcquireStatus.ALREADY_RAN: (Outcome.SKIPPED_BUSY, "the lock is no longer the tick's: it was released or "
                                                      "force-unlocked, or its lease ran out and another run took it "
                                                      "(raise the job's lease above the queue wait?)"),
}


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

    ``store``: the jobs' lock store (the schedulers' one: a URL or a LockStore); ``registry``: the declared jobs
    (default: the default registry, unless ``lookup`` is given), checked by :meth:`register`; ``lookup(name) ->
    Job`` finds a job (default: :func:`declared_or_stored` on ``registry`` and the store; raise for an unknown one);
    ``instance_id``: this worker's name in run records (default ``host:pid``). Listeners (:meth:`add_listener`)
    get a ``"started"`` and a ``"finished"`` RunRecord of each body as a scheduler's do; ``metrics`` /
    ``tracing`` as the Scheduler's. The store must be a :class:`ControlStore` (every built-in store is).
    """

    def __init__(self, store: str | LockStore, *, lookup: Callable[[str], Job] | None = None,
                 registry: Registry | None = None, instance_id: str | None = None, metrics: bool = False,
                 tracing: bool = False) -> None:
        self._owns_store = not isinstance(store, LockStore)
        self.store = store_from_url(store)
        if not isinstance(self.store, ControlStore):
            raise SchedulerConfigError(f"store {self.store!r} cannot hand a tick to a task worker (it is no "
                                       "ControlStore): run_on='tasks' needs one")
        self._taker: ControlStore = self.store  # the store, as the take-over contract
        if registry is None and lookup is None:
            registry = default_registry
        self._declared = registry  # checked against the visibility timeout by register()
        self.lookup = lookup if lookup is not None else declared_or_stored(registry or default_registry, self.store)
        self._instance_id = instance_id
        self.telemetry = build_telemetry(metrics=metrics, tracing=tracing)
        self.listeners = Listeners()
        self._heartbeats = Heartbeats(self.store)
        self._pings = Pings()  # the jobs' ping_url, after each body this worker ran
        self._kit = BodyKit(self.store, self._heartbeats, self._pings, Reports(self.listeners, self.telemetry),
                            log=logger)
        self._results: TaskBackend | None = None
        self._visibility: timedelta | None = None  # the registered queue's: a job's lease must be at least it
        self._closed = threading.Event()  # close() ends a wait to keep a result

    @property
    def instance_id(self) -> str:
        return self._instance_id or f"{socket.gethostname()}:{os.getpid()}"

    def add_listener(self, callback: Listener, *, events: Collection[str] = ("finished",)) -> Listener:
        """Call ``callback(record)`` for each body this worker runs (``"finished"``; ``"started"`` if asked)."""
        return self.listeners.add(callback, events)

    def register(self, queue: TaskQueue, *, max_attempts: int = 5,
                 visibility_timeout: timedelta = timedelta(minutes=5)) -> None:
        """Run :data:`TASK_TYPE` tasks of ``queue``'s workers with this runner. ``visibility_timeout``: how soon the
        task of a worker that died mid-body runs again; ``max_attempts``: how many such deaths it survives.

        A job whose lease is shorter than ``visibility_timeout`` is refused (docs/run-on-tasks.md): a declared one
        here (SchedulerConfigError naming it), a run-time schedule when its tick comes (not run, logged)."""
        short = [f"{job.name!r} (lease {job.lease})" for job in self._declared or ()
                 if job.run_on == "tasks" and job.lease < visibility_timeout]
        if short:
            raise SchedulerConfigError(
                f"job(s) {', '.join(short)} run on tasks with a lease shorter than the workers' visibility timeout "
                f"({visibility_timeout}): a dead worker's task would come back after a later tick may have taken the "
                "lock. Give each a lease of at least the visibility timeout, or lower the visibility timeout")
        queue.handlers.add(Handler(TASK_TYPE, self.run, max_attempts=max_attempts,
                                   visibility_timeout=visibility_timeout))
        self._results, self._visibility = queue.backend, visibility_timeout

    def close(self) -> None:
        self._closed.set()
        self._heartbeats.stop(timeout=5)
        self._pings.stop(time.monotonic() + 5)
        if self._owns_store:
            self.store.close()

    # -- one task ---------------------------------------------------------------------------------

    def run(self, payload: object) -> None:
        """Run the tick a task carries, at most once: a task whose body already ran (its result says so) is not run
        again; the run is taken over from the tick token under this worker's own token, or not run (paused, stale,
        no longer the tick's); while another worker's lease on it is live, :class:`RetryLater` until it runs out. A
        StoreUnavailable is raised (the task is tried again later)."""
        task = JobTask.from_payload(payload)
        earlier = self._result(task)
        if earlier.get("outcome") in FINISHED:
            logger.info("job %r (tick %s): task %s already ran its body (%s); not run again", task.job_name,
                        task.fire_time.isoformat(), task.task_id, earlier["outcome"])
            self._release(task, earlier.get("token"), earlier.get("hold"), earlier["outcome"], earlier.get("error"))
            return
        try:
            job = self.lookup(task.job_name)
        except StoreUnavailable:
            raise  # reading a run-time schedule's definition failed: tried again later
        except Exception as error:
            self._not_run(task, None, Outcome.FAILED,
                          f"job {task.job_name!r} is not declared in worker {self.instance_id}: {error}")
            return
        refused = self._refused_lease(job)
        if refused is not None:
            self._not_run(task, None, Outcome.FAILED, refused)
            return
        started_at, asked = datetime.now(UTC), time.monotonic()
        taken = self._taker.take_over(job.name, tick_token=task.token, owner=self.instance_id, lease=job.lease,
                                     schedule_version=task.schedule_version)
        if taken.acquired:
            assert taken.token is not None
            self._run_body(job, task, taken.token, started_at, asked)
        elif taken.status is AcquireStatus.BUSY:
            raise RetryLater(self._lease_left(job), f"job {job.name!r} (tick {task.fire_time.isoformat()}): taken "
                                                    f"over by {taken.holder or 'another worker'}, whose lease is live")
        else:
            self._not_run(task, job, *_REFUSED[taken.status])

    def _run_body(self, job: Job, task: JobTask, token: int, started_at: datetime, asked: float) -> None:
        """The body run (:func:`~mutexcron.running.body.run_body`), settled here: its outcome kept as the task's
        result, then its lock released, if this worker still holds the run it took over."""
        ctx = task.context(self.instance_id, token, asked)

        def settle(outcome: Outcome, error: str | None, beat: Beat) -> bool:
            if not self._still_holds(job, ctx):  # a worker that took the run over after this one stalled owns it
                logger.error("job %r (tick %s): this worker lost the run while its body ran (a stall past its "
                             "lease?); its outcome is not kept", job.name, task.fire_time.isoformat())
                return False
            hold = job.hold_at_least.total_seconds()
            # The least this worker's lease on the run lasts: its heartbeat's last renewal (its first: when the beat
            # was added, right after the take-over) plus a lease.
            held_until = beat.last_renewed + job.lease.total_seconds()
            # The result first: a worker that dies between the two leaves a task that, tried again, only releases.
            self._keep_result(task, {"outcome": str(outcome), "error": error, "token": token, "hold": hold,
                                     "worker": self.instance_id}, held_until)
            self._release(task, token, hold, str(outcome), error)
            return True

        started = task.record(self.instance_id, None, started_at, token=token)
        record = run_body(job, ctx, started, self._kit, settle)
        if record is None or record.outcome is Outcome.SKIPPED_STORE_ERROR:  # the run is this worker's until its
            # lease runs out: then a worker the task is delivered to again takes it over
            why = "this worker is closing" if record is None else record.error
            raise RetryLater(job.lease, f"job {job.name!r} (tick {task.fire_time.isoformat()}, task {task.task_id}): "
                                        f"{why}; not run here")

    def _still_holds(self, job: Job, ctx: JobContext) -> bool:
        """Whether this worker still holds the run it took over: a renewal, unless its heartbeat already lost it (a
        store that cannot say counts as held: the release will tell)."""
        if ctx.lock_lost:
            return False
        try:
            held = self.store.renew(job.name, token=ctx.token, lease=job.lease)
        except StoreUnavailable:
            return True
        if not held:
            ctx._mark_lost()
        return held

    def _refused_lease(self, job: Job) -> str | None:
        """Why ``job`` is not run here: a lease shorter than the visibility timeout (docs/run-on-tasks.md), so that a
        dead worker's task would come back after a later tick may have taken the lock; None if it is run."""
        if self._visibility is None or job.lease >= self._visibility:
            return None
        return (f"job {job.name!r}: its lease ({job.lease}) is shorter than the workers' visibility timeout "
                f"({self._visibility}): the task of a worker that dies mid-body would come back after a later tick "
                "may have taken the lock; not run. Give the job a lease of at least the visibility timeout")

    def _lease_left(self, job: Job) -> timedelta:
        """How long until the lease of the run's current holder runs out (on the store's clock), at least a tenth of a
        second; the job's lease where the store cannot say."""
        state = self.store.lock(job.name) if isinstance(self.store, ControlStore) else None
        if state is None or state.lock_until is None:
            return job.lease
        return max(state.lock_until - self.store.now(), timedelta(milliseconds=100))

    def _not_run(self, task: JobTask, job: Job | None, outcome: Outcome, why: str) -> None:
        """Fail closed: the body is not run; the reason is logged, kept as the task's result and recorded as a
        skip of the tick (``outcome``). A job this worker cannot run (``job`` None) also releases the tick's lock
        as failed, if no worker took it over."""
        logger.error("job %r (tick %s, task %s): %s", task.job_name, task.fire_time.isoformat(), task.task_id, why)
        self._store_result(task, {"outcome": "not_run", "error": why, "token": task.token,
                                  "worker": self.instance_id})
        if job is None:
            self._release(task, task.token, 0.0, str(Outcome.FAILED), why)
        now = datetime.now(UTC)
        self._finish(task.record(self.instance_id, outcome, now, finished_at=now, error=why))

    def _finish(self, record: RunRecord) -> None:
        self._kit.reports.finished(record)

    def _release(self, task: JobTask, token: object, hold: object, outcome: str, error: object) -> None:
        """Release the run held by ``token`` (a result's: read back, so checked here) with its outcome."""
        if isinstance(token, bool) or not isinstance(token, int):
            return
        seconds = float(hold) if isinstance(hold, int | float) else 0.0
        try:
            released = self.store.release(task.job_name, token=token, hold_at_least=timedelta(seconds=seconds),
                                          outcome=outcome, error=error if isinstance(error, str) else None)
        except StoreUnavailable as failure:
            logger.error("job %r: could not release its lock (it expires with its lease): %s", task.job_name, failure)
            return
        if not released:
            logger.debug("job %r: lock (token %d) no longer held at release", task.job_name, token)

    def _result(self, task: JobTask) -> dict[str, Any]:
        return decode_result(self._results.load_result(task.task_id) if self._results is not None else None)

    def _keep_result(self, task: JobTask, result: dict[str, Any], held_until: float) -> None:
        """Store a body's result, trying again while the store is down and this worker's lease on the run lasts
        (``held_until``, monotonic): no other worker can take the run over meanwhile, and once the result is kept the
        task delivered again only releases, so a store outage at the body's end does not run the tick again."""
        while not self._store_result(task, result, quiet=True):
            if time.monotonic() + RESULT_RETRY > held_until or self._closed.wait(RESULT_RETRY):
                logger.warning("task %s: could not keep the outcome of job %r before this worker's lease on it ran "
                               "out; the tick may run again on another worker", task.task_id, task.job_name)
                return

    def _store_result(self, task: JobTask, result: dict[str, Any], *, quiet: bool = False) -> bool:
        """Keep ``result`` as the task's; False if the store could not be reached (logged)."""
        if self._results is None:
            return True
        try:
            self._results.store_result(task.task_id, encode_result(result))
        except StoreUnavailable as error:
            (logger.debug if quiet else logger.warning)("task %s: could not keep the outcome of job %r: %s",
                                                        task.task_id, task.job_name, error)
            return False
        return True

"""The scheduler: APScheduler fires every declared job on every instance; the lock store picks one to run it."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from apscheduler.executors.base import BaseExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger

from . import _options
from .errors import LockBusy, SchedulerConfigError, StoreUnavailable
from .heartbeats import Heartbeats
from .lifecycle import Generation, WorkerPool
from .records import JobContext, Outcome, RunRecord
from .registry import BUSY_POLICIES, BusyPolicy, Job, Registry, default_registry
from .stores import AcquireStatus, Acquisition, LockStore, store_from_url

__all__ = ["Listener", "Scheduler"]

logger = logging.getLogger("mutexcron.scheduler")
UTC = UTC
Listener = Callable[[RunRecord], Any]
LISTENER_EVENTS = ("started", "finished")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _ShiftedTrigger(BaseTrigger):
    """Fires as an instance whose clock is off by ``skew`` would: nominal time t fires at real t - skew."""

    def __init__(self, trigger: BaseTrigger, skew: timedelta) -> None:
        self.trigger, self.skew = trigger, skew

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        previous = previous_fire_time + self.skew if previous_fire_time is not None else None
        fire = self.trigger.get_next_fire_time(previous, now + self.skew)
        return fire - self.skew if fire is not None else None

    def __str__(self) -> str:
        return f"{self.trigger} skewed by {self.skew}"


def _run_by_locking_executor() -> None:
    """The function APScheduler holds for each job; _LockingExecutor runs the job itself instead."""
    raise RuntimeError("mutexcron jobs run through the scheduler's own executor")


class _LockingExecutor(BaseExecutor):
    """An APScheduler executor that hands each fire, with its scheduled time, to the scheduler.

    APScheduler's own executors call the job function without the scheduled time; we need that time
    because (job name, scheduled time) is the identity of a run across the fleet. The fires run in the
    generation's daemon worker pool, which the scheduler's shutdown closes and joins with a deadline.
    """

    def __init__(self, fire: Callable[[str, datetime], None], pool: WorkerPool) -> None:
        super().__init__()
        self._fire = fire
        self._pool = pool

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        def run() -> None:
            try:
                self._fire(job.id, run_times[-1])
            finally:
                self._run_job_success(job.id, [])

        self._pool.submit(run)

    def shutdown(self, wait: bool = True) -> None:
        """Nothing to do: the scheduler's Generation closes the pool and joins it within its deadline."""


class Scheduler:
    """Fires every job of ``registry`` on this instance and runs those whose lock this instance wins.

    ``store`` is a URL (``redis://…``, ``mongodb://…``, ``memory://``), a dotted path, or a LockStore.
    ``clock_skew`` is a testing hook: it makes this instance fire as if its clock were off by that much
    (``timedelta(seconds=-2)``: two seconds late). ``fire_context`` makes a context manager entered
    around each fire in its worker thread (Django uses it to close stale database connections).
    ``busy_grace``: how long a scheduled fire that finds the lock held by an earlier run keeps trying
    before it records ``skipped_busy`` (with ``on_busy="skip"`` or ``"raise"``).
    """

    def __init__(
        self,
        store: str | LockStore,
        *,
        registry: Registry | None = None,
        instance_id: str | None = None,
        timezone: str | tzinfo = "UTC",
        misfire_grace_time: timedelta = timedelta(seconds=60),
        max_workers: int = 10,
        shutdown_timeout: timedelta = timedelta(seconds=30),
        clock_skew: timedelta = timedelta(0),
        fire_context: Callable[[], AbstractContextManager[Any]] | None = None,
        busy_grace: timedelta = timedelta(seconds=1),
    ) -> None:
        bad = SchedulerConfigError  # every option is checked before the store is built
        _options.registry(registry, what="Scheduler registry", error=bad)
        self.registry = default_registry if registry is None else registry  # an empty one is falsy
        self._instance_id = _options.instance_id(instance_id, what="Scheduler instance_id", error=bad)
        self.timezone = _options.zone(timezone, what="Scheduler timezone", error=bad)
        self.misfire_grace_time = _options.duration(misfire_grace_time, what="Scheduler misfire_grace_time",
                                                    error=bad, seconds=False)
        self.max_workers = _options.count(max_workers, what="Scheduler max_workers", error=bad, maximum=1000)
        self.shutdown_timeout = _options.duration(shutdown_timeout, what="Scheduler shutdown_timeout", error=bad,
                                                  seconds=False)
        self.clock_skew = _options.duration(clock_skew, what="Scheduler clock_skew", error=bad, seconds=False,
                                            allow_negative=True)
        if fire_context is not None and not callable(fire_context):
            raise bad(f"Scheduler fire_context must be a context manager factory or None, not {fire_context!r}")
        self.fire_context = fire_context or nullcontext
        self.busy_grace = _options.duration(busy_grace, what="Scheduler busy_grace", error=bad, seconds=False)
        self._owns_store = not isinstance(store, LockStore)
        self.store = store_from_url(store)
        self._listeners: list[tuple[Listener, frozenset[str]]] = []
        self._life = self._new_generation()
        self._aps: BackgroundScheduler | None = None
        self._state_lock = threading.Lock()
        self._store_down_since: datetime | None = None
        self._skipped_while_down = 0

    # -- public API ---------------------------------------------------------------------------

    @property
    def instance_id(self) -> str:
        """This instance's name in lock documents and run records (default ``host:pid``, read at use,
        so a scheduler created before a fork names the child)."""
        return self._instance_id or f"{socket.gethostname()}:{os.getpid()}"

    @property
    def running(self) -> bool:
        return self._aps is not None

    def add_listener(self, callback: Listener, *, events: Collection[str] = ("finished",)) -> Listener:
        """Call ``callback(record)`` on every ``"finished"`` run or skip (and, if asked, ``"started"``)."""
        unknown = set(events) - set(LISTENER_EVENTS)
        if unknown:
            raise ValueError(f"unknown listener events {sorted(unknown)}; use {LISTENER_EVENTS}")
        self._listeners.append((callback, frozenset(events)))
        return callback

    def remove_listener(self, callback: Listener) -> None:
        self._listeners = [(cb, ev) for cb, ev in self._listeners if cb is not callback]

    def start(self) -> None:
        """Seed a lock document for every declared job, then start firing their triggers."""
        if self._aps is not None:
            raise RuntimeError("scheduler is already running")
        jobs = list(self.registry)
        if self._life.closing.is_set():
            self._life = self._new_generation()  # a fire left over from the last run keeps the old one
        life = self._life
        self.seed()
        aps = BackgroundScheduler(
            timezone=UTC,
            executors={"default": _LockingExecutor(functools.partial(self._fire, life),
                                                   life.start_pool(self.max_workers))},
            # The store decides who runs; locally every fire is handed over, and coalesced if late.
            job_defaults={"coalesce": True, "max_instances": 10_000, "misfire_grace_time": None},
        )
        for job in jobs:
            trigger: BaseTrigger = job.trigger(self.timezone)
            if self.clock_skew:
                trigger = _ShiftedTrigger(trigger, self.clock_skew)
            aps.add_job(_run_by_locking_executor, trigger=trigger, id=job.name, name=job.name)
        aps.start()
        self._aps = aps
        logger.info(
            "mutexcron scheduler %s started with %d job(s) on %r", self.instance_id, len(jobs), self.store
        )

    def seed(self) -> int:
        """Create missing lock documents for every declared job (never resets one); safe on many instances."""
        names = self.registry.names()
        try:
            created = self.store.seed(names)
        except StoreUnavailable as error:
            # Not fatal: acquire creates a missing document too, and the store may come back.
            self._store_failed(error)
            return 0
        self._store_ok()
        if created:
            logger.info("seeded %d new lock(s) of %d job(s)", created, len(names))
        return created

    def running_jobs(self) -> list[str]:
        """Names of the jobs whose bodies are running on this instance now."""
        return self._life.running_names()

    def shutdown(self, wait: bool = True, timeout: timedelta | None = None) -> bool:
        """Stop firing; from now on no body starts. Returns within ``timeout`` (default ``shutdown_timeout``)
        plus ``SHUTDOWN_GRACE`` (1 s), whatever is in flight.

        With ``wait``, waits up to ``timeout`` for the fires in flight (running bodies, which release their
        locks; acquisitions, which are released unrun), then stops the heartbeat thread, closes a store it
        built and joins its worker threads. A body still running then keeps its lock until its lease runs
        out (releasing it under a running body would let another instance run the job at the same time).
        Without ``wait`` it returns at once; running bodies go on and release their locks, and the last
        fire to end stops the threads and closes the store. True if no fire was in flight when it returned.
        """
        life = self._life
        aps, self._aps = self._aps, None
        life.close()
        if aps is not None:
            aps.shutdown(wait=False)
        limit = (timeout if timeout is not None else self.shutdown_timeout).total_seconds()
        return life.finish(wait=wait, timeout=limit)

    def run_now(self, name: str, *, on_busy: BusyPolicy | None = None) -> RunRecord:
        """Run job ``name`` now, in this thread, under its lock (a manual run, outside the tick ledger).

        Returns the RunRecord; with ``on_busy="raise"`` a busy lock raises :class:`LockBusy` instead.
        ``on_busy`` overrides the job's policy for this run (an admin request should not ``"wait"``).
        """
        job = self.registry.get(name)
        if on_busy is not None and on_busy != job.on_busy:
            if on_busy not in BUSY_POLICIES:
                raise ValueError(f"on_busy must be one of {BUSY_POLICIES}, not {on_busy!r}")
            job = dataclasses.replace(job, on_busy=on_busy)
        record = self._execute_now(job, _utc_now(), manual=True)
        if record.outcome is Outcome.SKIPPED_BUSY and job.on_busy == "raise":
            raise LockBusy(name, record)
        return record

    def run_tick(self, name: str, fire_time: datetime) -> RunRecord:
        """Run the fire of job ``name`` scheduled at the aware ``fire_time`` now, in this thread, exactly as
        the trigger would: it runs only if no instance ran that tick. For tests and tooling."""
        if fire_time.tzinfo is None:
            raise ValueError(f"fire_time={fire_time!r} is naive; pass an aware datetime")
        return self._execute_now(self.registry.get(name), fire_time.astimezone(UTC), manual=False)

    def __enter__(self) -> Scheduler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<Scheduler {self.instance_id} {state} jobs={len(self.registry)} store={self.store!r}>"

    # -- firing -----------------------------------------------------------------------------------

    def _new_generation(self) -> Generation:
        return Generation(Heartbeats(self.store), self.store.close if self._owns_store else None)

    def _execute_now(self, job: Job, fire_time: datetime, *, manual: bool) -> RunRecord:
        """A run in the caller's thread (run_now, run_tick): one more fire in flight for shutdown."""
        life = self._life
        if not life.enter():
            raise RuntimeError(f"scheduler {self.instance_id} is shut down; start() it to run jobs again")
        try:
            record = self._execute(life, job, fire_time, manual=manual)
        finally:
            life.leave()
        if record is None:
            raise RuntimeError(f"job {job.name!r}: the scheduler shut down while it took its lock; released unrun")
        return record

    def _fire(self, life: Generation, name: str, run_time: datetime) -> None:
        """Called by APScheduler's executor thread when a job's trigger fires on this instance."""
        fire_time = (run_time + self.clock_skew).astimezone(UTC)
        late = _utc_now() - run_time
        if late > self.misfire_grace_time:
            logger.warning("job %r: fire %s missed by %s (misfire_grace_time %s); not run", name,
                           fire_time.isoformat(), late, self.misfire_grace_time)
            return
        try:
            job = self.registry.get(name)
        except KeyError:
            logger.warning("job %r fired but is no longer declared", name)
            return
        if not life.enter():
            logger.debug("job %r: fire %s dropped: the scheduler is shutting down", name, fire_time.isoformat())
            return
        try:
            with self.fire_context():
                self._execute(life, job, fire_time, manual=False)
        finally:
            life.leave()

    def _execute(self, life: Generation, job: Job, fire_time: datetime, *, manual: bool) -> RunRecord | None:
        """Acquire, run, release, notify; None for a lock won after shutdown began (released unrun)."""
        started_at = _utc_now()

        def skipped(outcome: Outcome, why: str) -> RunRecord:
            return self._finish(RunRecord(job.name, fire_time, self.instance_id, outcome, started_at, _utc_now(),
                                          error=why, manual=manual))

        try:
            acquisition = self._acquire(life, job, None if manual else fire_time)
        except StoreUnavailable as error:
            self._store_failed(error)
            return skipped(Outcome.SKIPPED_STORE_ERROR, str(error))
        self._store_ok()
        if acquisition.status is AcquireStatus.ALREADY_RAN:
            logger.debug("job %r fire %s already ran elsewhere", job.name, fire_time.isoformat())
            return skipped(Outcome.SKIPPED_ALREADY_RAN, "this fire already ran")
        if acquisition.status is AcquireStatus.BUSY:
            why = f"lock held by {acquisition.holder or 'another instance'}"
            log = logger.error if job.on_busy == "raise" else logger.info
            log("job %r fire %s skipped: %s", job.name, fire_time.isoformat(), why)
            return skipped(Outcome.SKIPPED_BUSY, why)
        assert acquisition.token is not None
        ctx = JobContext(job.name, fire_time, self.instance_id, acquisition.token)
        if not life.admit(ctx):
            self._release_unrun(life, job, ctx)
            return None
        return self._run_body(life, job, ctx, started_at, manual)

    def _acquire(self, life: Generation, job: Job, fire_time: datetime | None) -> Acquisition:
        def acquire() -> Acquisition:
            return self.store.acquire(job.name, owner=self.instance_id, lease=job.lease, fire_time=fire_time)

        acquisition = acquire()
        if acquisition.status is not AcquireStatus.BUSY:
            return acquisition
        if job.on_busy == "wait":
            patience = job.lease  # by then a live holder has released it or died
        elif fire_time is not None:
            # BUSY means an earlier run holds the lock (a later one would be ALREADY_RAN). It may be just
            # finishing, e.g. an old tick run late by an instance whose clock is slow: give it busy_grace
            # rather than lose this tick to it.
            patience = self.busy_grace
        else:
            return acquisition
        deadline = time.monotonic() + patience.total_seconds()
        pause = 0.02
        while acquisition.status is AcquireStatus.BUSY and time.monotonic() < deadline:
            if life.closing.wait(min(pause, max(0.0, deadline - time.monotonic()))):
                break
            pause = min(pause * 2, 1.0)
            acquisition = acquire()
        return acquisition

    def _run_body(self, life: Generation, job: Job, ctx: JobContext, started_at: datetime,
                  manual: bool) -> RunRecord | None:
        fire_time, token = ctx.fire_time, ctx.token
        beat = life.heartbeats.add(job, ctx)
        if beat is None:  # shutdown gave up waiting (its timeout passed) just after admit(): not started
            life.done(ctx)
            logger.warning("job %r (fire %s): shutdown finished before its body started; not run, its lock "
                           "expires with its lease", job.name, fire_time.isoformat())
            return None
        if self._wants("started"):
            self._notify(RunRecord(job.name, fire_time, self.instance_id, None, started_at, None, token=token,
                                   manual=manual), "started")
        outcome, error = Outcome.SUCCEEDED, None
        try:
            job.call(ctx)
        except Exception:
            outcome, error = Outcome.FAILED, traceback.format_exc()
            logger.exception("job %r (fire %s) failed", job.name, fire_time.isoformat())
        finally:
            life.heartbeats.remove(beat)
            if life.finalized:
                logger.warning("job %r (fire %s) ended after shutdown gave up waiting for it; its lock expires "
                               "with its lease", job.name, fire_time.isoformat())
            else:
                self._release(job, token)
            life.done(ctx)
        record = RunRecord(job.name, fire_time, self.instance_id, outcome, started_at, _utc_now(), error=error,
                           token=token, lock_lost=ctx.lock_lost, manual=manual)
        if outcome is Outcome.SUCCEEDED and logger.isEnabledFor(logging.INFO):
            logger.info("job %r (fire %s) succeeded in %.3fs", job.name, fire_time.isoformat(),
                        (record.finished_at - started_at).total_seconds())  # type: ignore[operator]
        return self._finish(record)

    def _release_unrun(self, life: Generation, job: Job, ctx: JobContext) -> None:
        """A lock won after shutdown stopped waiting for the fires in flight: give it back at once without
        running the body. The store already counts this tick as taken, so no instance runs it; it is logged,
        not recorded as a run."""
        if life.finalized:
            logger.warning("job %r: fire %s won its lock after shutdown finished; not run, the lock expires "
                           "with its lease", job.name, ctx.fire_time.isoformat())
            return
        logger.warning("job %r: fire %s won its lock after shutdown stopped waiting; released without running it",
                       job.name, ctx.fire_time.isoformat())
        self._release(job, ctx.token)

    def _release(self, job: Job, token: int) -> None:
        try:
            released = self.store.release(job.name, token=token, hold_at_least=job.hold_at_least)
        except StoreUnavailable as error:
            self._store_failed(error)
            logger.error("job %r: could not release its lock (it expires with its lease): %s", job.name, error)
            return
        if not released:
            logger.warning("job %r: lock (token %d) was no longer ours at release; left untouched", job.name, token)

    def _finish(self, record: RunRecord) -> RunRecord:
        if record.outcome is Outcome.SKIPPED_STORE_ERROR:
            with self._state_lock:
                self._skipped_while_down += 1
        self._notify(record, "finished")
        return record

    def _wants(self, event: str) -> bool:
        return any(event in events for _, events in self._listeners)

    def _notify(self, record: RunRecord, event: str) -> None:
        for callback, events in list(self._listeners):
            if event in events:
                try:
                    callback(record)
                except Exception:
                    logger.exception("mutexcron listener %r failed on %s record of job %r", callback, event,
                                     record.job_name)

    # -- store health: one error per outage, not one per tick ---------------------------------------

    def _store_failed(self, error: StoreUnavailable) -> None:
        with self._state_lock:
            first = self._store_down_since is None
            if first:
                self._store_down_since = _utc_now()
                self._skipped_while_down = 0
        if first:
            logger.error("lock store unreachable; jobs are skipped until it returns: %s", error)
        else:
            logger.debug("lock store still unreachable: %s", error)

    def _store_ok(self) -> None:
        with self._state_lock:
            since, self._store_down_since = self._store_down_since, None
            skipped = self._skipped_while_down
        if since is not None:
            logger.warning("lock store reachable again after %s; %d fire(s) were skipped meanwhile",
                           _utc_now() - since, skipped)

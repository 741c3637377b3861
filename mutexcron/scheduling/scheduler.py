"""The scheduler: APScheduler fires every declared job on every instance; the lock store picks one to run it."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from .. import definitions
from ..definitions import DEFAULT_LEASE, RuntimeSchedules, ScheduleDefinition
from ..errors import LockBusy, SchedulerConfigError, StoreUnavailable, UnknownJobError
from ..listeners import Listener, Listeners
from ..ops import control
from ..ops import schedules as run_time_schedules
from ..ops.alerts import Alerts
from ..ops.checkup import DEFAULT_MISFIRE_GRACE_TIME
from ..ops.health import StoreHealth
from ..records import Outcome, RunRecord
from ..registry import BusyPolicy, CatchUp, Job, Registry, check_on_busy
from ..running.body import Reports
from ..running.heartbeats import Heartbeats
from ..running.pings import PING_TIMEOUT, Pings
from ..stores import LockState, LockStore, store_from_url, supports_control
from ..tasks.job_runs import Offload, TasksOption
from ..telemetry import build_telemetry
from .backfill import run_backfill
from .batch import PassingScheduler, batched_fires
from .catchup import CatchUps
from .executor import LockingExecutor, run_by_locking_executor
from .fires import Fire, FireKind
from .job_checks import check_jobs
from .lifecycle import Generation
from .options import SchedulerOptions
from .runs import Runs
from .schedules import Schedules, ScheduleSync, read_states

__all__ = ["Listener", "Scheduler"]

logger = logging.getLogger("mutexcron.scheduler")

def _utc_now() -> datetime:
    return datetime.now(UTC)


class Scheduler:
    """Fires every job of ``registry`` on this instance and runs those whose lock this instance wins.

    ``store`` is a URL (``redis://…``, ``mongodb://…``, ``memory://``), a dotted path, or a LockStore.
    ``clock_skew`` is a testing hook: it makes this instance fire as if its clock were off by that much
    (``timedelta(seconds=-2)``: two seconds late). ``fire_context`` makes a context manager entered
    around each fire in its worker thread (Django uses it to close stale database connections).
    ``busy_grace``: how long a scheduled fire that finds the lock held by an earlier run keeps trying
    before it records ``skipped_busy`` (with ``on_busy="skip"`` or ``"raise"``). ``sync_interval``: how
    often a running scheduler reads the store's schedule overrides (and notices that the store came back,
    and judges overdue and failing jobs). ``metrics`` / ``tracing``: Prometheus metrics and OpenTelemetry
    spans of the runs (the ``prometheus`` and ``otel`` extras; :mod:`mutexcron.telemetry`). ``ping_timeout``:
    the deadline of each ``ping_url`` ping, name resolution and redirects included (:mod:`mutexcron.running.pings`).
    ``tasks``: where ``run_on="tasks"`` jobs' bodies are enqueued: a task backend URL, a
    :class:`~mutexcron.tasks.TaskQueue`, or a callable returning one (:mod:`mutexcron.tasks.job_runs.offload`).
    """

    def __init__(
        self,
        store: str | LockStore,
        *,
        registry: Registry | None = None,
        instance_id: str | None = None,
        timezone: str | tzinfo = "UTC",
        misfire_grace_time: timedelta = DEFAULT_MISFIRE_GRACE_TIME,
        max_workers: int = 10,
        shutdown_timeout: timedelta = timedelta(seconds=30),
        clock_skew: timedelta = timedelta(0),
        fire_context: Callable[[], AbstractContextManager[Any]] | None = None,
        busy_grace: timedelta = timedelta(seconds=1),
        sync_interval: timedelta = timedelta(seconds=5),
        metrics: bool = False,
        tracing: bool = False,
        ping_timeout: timedelta | float = PING_TIMEOUT,
        tasks: TasksOption = None,
    ) -> None:
        # Every option is checked before the store is built.
        self.options = options = SchedulerOptions.checked(dict(
            registry=registry, instance_id=instance_id, timezone=timezone, misfire_grace_time=misfire_grace_time,
            max_workers=max_workers, shutdown_timeout=shutdown_timeout, clock_skew=clock_skew,
            fire_context=fire_context, busy_grace=busy_grace, sync_interval=sync_interval, ping_timeout=ping_timeout))
        self._telemetry = build_telemetry(metrics=metrics, tracing=tracing, error=SchedulerConfigError)
        offload = Offload(tasks)
        self.registry, self.timezone, self.fire_context = options.registry, options.timezone, options.fire_context
        self.jobs = options.jobs  # the declared jobs and the run-time schedules this instance follows
        self._runtime = RuntimeSchedules(options.jobs)
        self.misfire_grace_time, self.shutdown_timeout = options.misfire_grace_time, options.shutdown_timeout
        self.max_workers, self.clock_skew, self.busy_grace = options.max_workers, options.clock_skew, options.busy_grace
        self.sync_interval, self.ping_timeout = options.sync_interval, options.ping_timeout
        self._owns_store = not isinstance(store, LockStore)
        self.store = store_from_url(store)
        self._listeners = Listeners()
        self._life = self._new_generation()
        self._aps: BackgroundScheduler | None = None
        self._schedules = Schedules(options.timezone, options.clock_skew,
                                    resolve=lambda job, state: self._runtime.current(job, state, self._schedules.drop))
        # Ticks are missed while the store is away: catch them up once it is back.
        self._health = StoreHealth(on_down=lambda: self._catch_ups.mark(self._catching_up_jobs()),
                                   on_back=lambda: self._start_catch_up(self._life) if self._aps else None)
        self._alerts = Alerts(self.store, instance_id=options.name, misfire_grace_time=options.misfire_grace_time,
                              notify=self._listeners.notify, overdue=self._telemetry.overdue)
        self._runs = Runs(self.store, options, self._schedules, self._health, Reports(
            self._listeners, self._telemetry, lambda name: self._alerts.succeeded(name, options.now())))
        self._runs.offload = offload
        self._catch_ups = CatchUps(self._runs.run_missed, self._runs.execute)

    # -- public API ---------------------------------------------------------------------------

    @property
    def instance_id(self) -> str:
        """This instance's name in lock documents and run records (default ``host:pid``, read at use,
        so a scheduler created before a fork names the child)."""
        return self.options.name()

    @property
    def running(self) -> bool:
        return self._aps is not None

    def add_listener(self, callback: Listener, *, events: Collection[str] = ("finished",)) -> Listener:
        """Call ``callback(record)`` on every ``"finished"`` run or skip (and, if asked, ``"started"``);
        ``callback(alert)`` for ``"overdue"``, ``"failing"`` and ``"recovered"`` (once per incident, fleet-wide,
        on the instance that noticed first: see :mod:`mutexcron.ops.alerts`)."""
        return self._listeners.add(callback, events)

    def remove_listener(self, callback: Listener) -> None:
        self._listeners.remove(callback)

    def start(self) -> None:
        """Seed a lock document for every declared job, then start firing their triggers."""
        if self._aps is not None:
            raise RuntimeError("scheduler is already running")
        check_jobs(self.store, self.registry, self._runs.offload)
        if self._life.closing.is_set():
            self._life = self._new_generation()  # a fire left over from the last run keeps the old one
        life = self._life
        self.seed()
        states = self._read_states() or {}
        self._runtime.sync(states)
        jobs = list(self.jobs)
        executor = LockingExecutor(life, life.start_pool(self.max_workers), self.options, self._runs, self._catch_ups,
                                   batched=batched_fires(self.store))
        aps = PassingScheduler(
            executor.batch, timezone=UTC, executors={"default": executor},
            # The store decides who runs; locally every fire is handed over (no max_instances), and coalesced if late.
            job_defaults={"coalesce": True, "misfire_grace_time": None},
        )
        for job in jobs:
            trigger = self._schedules.build(job, states.get(job.name))
            aps.add_job(run_by_locking_executor, trigger=trigger, id=job.name, name=job.name)
        self._schedules.attach(aps, run_by_locking_executor)
        self._catch_ups.mark(self._catching_up_jobs())
        aps.start()
        self._aps = aps
        life.sync = ScheduleSync(self.sync_interval.total_seconds(), functools.partial(self._sync, life),
                                 life.closing)
        life.sync.start()
        self._start_catch_up(life)
        self._check_alerts(states)
        logger.info("mutexcron scheduler %s started with %d job(s) on %r", self.instance_id, len(jobs), self.store)
        if not supports_control(self.store):
            logger.info("lock store %r has no control plane (mutexcron.stores.ControlStore): every tick runs once, "
                        "without pauses, schedule overrides, catch-up or alerts", self.store)

    def seed(self) -> int:
        """Create missing lock documents for every declared job (never resets one); safe on many instances."""
        names = self.registry.names()
        try:
            created = self.store.seed(names)
        except StoreUnavailable as error:
            # Not fatal: acquire creates a missing document too, and the store may come back.
            self._health.failed(error)
            return 0
        self._health.ok()
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
        self._schedules.attach(None)
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
        job = self._runtime.known(name, self.store)
        if on_busy is not None and on_busy != job.on_busy:
            job = dataclasses.replace(job, on_busy=check_on_busy(on_busy, name))
        # A run-time schedule's run is checked against the store's definition in the acquire itself.
        record = self._execute_now(job, _utc_now(), FireKind.MANUAL, self._runtime.version(name))
        if job.runtime and record.outcome is Outcome.SKIPPED_STALE_SCHEDULE and name not in self._runtime.names():
            raise UnknownJobError(f"no job named {name!r}: its run-time schedule was removed from the store")
        if record.outcome is Outcome.SKIPPED_BUSY and job.on_busy == "raise":
            raise LockBusy(name, record)
        return record

    def run_tick(self, name: str, fire_time: datetime) -> RunRecord:
        """Run the fire of job ``name`` scheduled at the aware ``fire_time`` now, in this thread, exactly as
        the trigger would: it runs only if no instance ran that tick. For tests and tooling."""
        if fire_time.tzinfo is None:
            raise ValueError(f"fire_time={fire_time!r} is naive; pass an aware datetime")
        job, version = self._runtime.known(name, self.store), self._schedules.version(name)
        return self._execute_now(job, fire_time.astimezone(UTC), FireKind.SCHEDULED,  # not fired on yet: the
                                 self._runtime.version(name) if version is None else version)  # definition's

    def backfill(self, name: str, start: datetime, end: datetime, *, by: str | None = None) -> int:
        """Run each tick of job ``name``'s schedule (an operator's override counts) from the aware ``start``
        (included) to ``end`` (excluded), oldest first, in this thread, each once across the fleet however many
        backfills of the range run at once; the number of ticks whose body ran (docs/backfill.md).

        Each runs under the job's lock (waiting for a scheduled run that holds it), with ``fire_time`` the tick
        and ``backfill=True``. The same range run again runs only the ticks no backfill of it took. It stops
        early, logged, once the job is paused. :class:`JobDefinitionError` for a naive time, ``end <= start``, an
        ``end`` after the store's now or over 10,000 ticks; :class:`UnknownJobError`; StoreUnavailable once the
        store cannot be reached."""
        job = self._runtime.known(name, self.store)
        with self._entered() as life:
            return run_backfill(self._runs, life, job, start, end, by)

    # -- run-time control, fleet-wide (docs/fleet-control.md) --------------------------------------

    def pause(self, name: str, *, until: datetime | None = None, by: str | None = None,
              note: str | None = None) -> LockState:
        """Pause job ``name`` on every instance: once this returns, no run of it starts (the store's acquire
        refuses it) until :meth:`resume` or the aware ``until``; ``note`` (why, at most 1,000 characters) is kept
        until then. A running body goes on. Works on a scheduler never started; :class:`UnknownJobError` for a job
        the store does not know."""
        return control.pause(self.store, self.jobs, name, until=until, by=by, note=note)

    def resume(self, name: str) -> LockState:
        """Lift job ``name``'s pause; the ticks it skipped are never caught up."""
        return control.resume(self.store, self.jobs, name)

    def set_schedule(self, name: str, spec: str, *, timezone: str | tzinfo | None = None,
                     by: str | None = None) -> LockState:
        """Replace job ``name``'s schedule on every instance with ``spec`` (in ``timezone``, default the job's):
        once this returns, no tick of the old schedule starts, and every instance fires the new one within
        ``sync_interval``. :class:`CronSpecError` for a bad spec or zone, before anything is written."""
        state = control.set_schedule(self.store, self.jobs, name, spec, timezone=timezone, by=by)
        self._follow(state)
        return state

    def reset_schedule(self, name: str, *, by: str | None = None) -> LockState:
        """Go back to the schedule in the code for job ``name``, on every instance."""
        state = control.set_schedule(self.store, self.jobs, name, None, by=by)
        self._follow(state)
        return state

    # -- run-time schedules (docs/schedules.md) ----------------------------------------------------------

    def add_schedule(self, name: str, spec: str, target: str | Callable[..., Any], *,
                     kwargs: dict[str, Any] | None = None, timezone: str | tzinfo | None = None,
                     lease: timedelta | float = DEFAULT_LEASE, catch_up: CatchUp = "skip", run_on: str = "here",
                     timeout: timedelta | float | None = None, start_deadline: timedelta | float | None = None,
                     on_busy: BusyPolicy = "skip", pause_on_failure: int | bool = False, by: str | None = None,
                     ) -> LockState:
        """Store a schedule that calls the allowed ``target`` (its name, or the function) with the JSON ``kwargs`` at
        ``spec``: every running instance fires it within ``sync_interval`` as a declared job with these options (as
        :func:`mutex_cron` checks them). Adding a name again redefines it. A bad field or value: JobDefinitionError."""
        definition = ScheduleDefinition(
            definitions.target_key(target, self.jobs, name), spec, {} if kwargs is None else kwargs,
            definitions.zone_of(timezone, name), definitions.lease_of(lease, name), catch_up, run_on,
            **definitions.run_options(name, timeout, start_deadline, on_busy, pause_on_failure))
        state = run_time_schedules.add(self.store, self.jobs, name, definition, by=by)
        self._follow(state)
        return state

    def remove_schedule(self, name: str, *, by: str | None = None) -> LockState:
        """Remove run-time schedule ``name`` on every instance: no tick of it starts after this returns (a running
        body finishes and releases). Returns its document, hidden; :class:`UnknownJobError` if the store has none."""
        state = run_time_schedules.remove(self.store, self.jobs, name, by=by)
        if self._runtime.drop(name):
            self._schedules.drop(name)
        return state

    def schedules(self) -> list[LockState]:
        """The run-time schedules the store holds (their lock documents, ``definition`` set), sorted by name."""
        return run_time_schedules.stored(self.store)

    def __enter__(self) -> Scheduler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<Scheduler {self.instance_id} {state} jobs={len(self.jobs)} store={self.store!r}>"

    # -- firing -----------------------------------------------------------------------------------

    def _new_generation(self) -> Generation:
        return Generation(Heartbeats(self.store), self._close_connections,
                          Pings(self.ping_timeout.total_seconds(), dropped=self._telemetry.ping_dropped))

    def _close_connections(self) -> None:
        """At the end of a generation: the store (if this scheduler built it) and a task queue it built."""
        self._runs.offload.close()
        if self._owns_store:
            self.store.close()

    def _execute_now(self, job: Job, fire_time: datetime, kind: FireKind, version: int | None = None) -> RunRecord:
        """A run in the caller's thread (run_now, run_tick): one more fire in flight for shutdown."""
        with self._entered() as life:
            record = self._runs.execute(Fire(job, fire_time, version, life, kind))
        if record is None:
            raise RuntimeError(f"job {job.name!r}: the scheduler shut down while it took its lock; released unrun")
        return record

    @contextlib.contextmanager
    def _entered(self) -> Iterator[Generation]:
        """This generation, with one more run in flight in the caller's thread (shutdown waits for it)."""
        life = self._life
        if not life.enter():
            raise RuntimeError(f"scheduler {self.instance_id} is shut down; start() it to run jobs again")
        try:
            yield life
        finally:
            life.leave()

    # -- the store's schedules, and catching up missed ticks -------------------------------------------

    def _read_states(self) -> dict[str, LockState] | None:
        return read_states(self.store, self._health)

    def _sync(self, life: Generation) -> None:
        """Every sync_interval: follow schedule overrides; notice that the store came back; judge alerts from
        the same read."""
        states = self._read_states()
        if states is None:
            return
        changed, gone = self._runtime.sync(states)
        for name in gone:
            self._schedules.drop(name)
        for job in self.jobs:
            state = states.get(job.name)
            if state is not None:
                self._schedules.apply(job, state)
        self._start_catch_up(life, [job for job, _ in changed])
        self._check_alerts(states)

    def _check_alerts(self, states: dict[str, LockState] | None) -> None:
        """Overdue and failing jobs, from lock documents just read (nothing to judge if none could be)."""
        if states:
            self._alerts.check(self.jobs, states, self._schedules.trigger, self.options.now())

    def _follow(self, state: LockState) -> None:
        """After this instance changed a schedule: fire on it now rather than at the next sync."""
        if state.definition is not None:
            job = self._runtime.put(state)
            if job is not None and self._aps is not None:
                self._schedules.apply(job, state)
                self._start_catch_up(self._life, [job])
        elif self._aps is not None and state.name in self.jobs:
            self._schedules.apply(self.jobs.get(state.name), state)

    def _catching_up_jobs(self) -> list[str]:
        """The jobs that catch up missed ticks: none on a store without the control plane (no last fire to read)."""
        if not supports_control(self.store):
            return []
        return [job.name for job in self.jobs if job.catch_up != "skip"]

    def _start_catch_up(self, life: Generation, added: Sequence[Job] = ()) -> None:
        """Catch up, in the worker pool, every job still to be caught up (after start, when the store is back, and
        run-time schedules ``added`` since)."""
        if supports_control(self.store):
            self._catch_ups.mark([job.name for job in added if job.catch_up != "skip"])
        for name in self._catch_ups.pending():
            if name in self.jobs and life.pool is not None:
                life.pool.submit(functools.partial(self._catch_up_in_pool, life, self.jobs.get(name)))

    def _catch_up_in_pool(self, life: Generation, job: Job) -> None:
        if not life.enter():
            return
        try:
            with self.fire_context():
                self._catch_ups.run(life, job, None)
        finally:
            life.leave()

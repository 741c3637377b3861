"""One fire of one job on this instance, the one way every run goes: acquire the lock (refused while
paused, for a stale schedule, for a tick already taken, while busy), run the body under the heartbeats,
release, report (listeners, telemetry, alerts). The executor decides *when*; this decides *whether* and does it."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ..errors import StoreUnavailable
from ..ops.control import missed_ticks
from ..records import JobContext, Outcome, RunRecord
from ..running.body import BodyKit, Reports, run_body
from ..running.failures import count_failure
from ..running.heartbeats import Beat
from ..running.limits import late_start
from ..stores import AcquireStatus, Acquisition, LockStore, ReleaseRequest, require_control
from ..tasks.job_runs import JobTask, Offload, tick_task_id
from .busy import busy_plan, busy_skip
from .fires import Fire, FireKind, HandOff, Skip
from .overlap import Buffered, Overlap
from .releases import Releases
from .waiting import BusyWaits, Waiting

if TYPE_CHECKING:
    from ..ops.health import StoreHealth
    from ..registry import Job
    from .lifecycle import Generation
    from .options import SchedulerOptions
    from .schedules import Schedules

__all__ = ["Runs"]

logger = logging.getLogger("mutexcron.scheduler")
Done = Callable[["RunRecord | None"], None]  # called once a fire is over, with its record (None: it has none)
_ONE_MICROSECOND = timedelta(microseconds=1)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _here(call: Callable[[], None]) -> bool:
    """The hand-off of :meth:`Runs.execute`: every step of its one fire in the caller's thread."""
    call()
    return True


class Runs:
    """Runs fires for one scheduler, named ``options.name()`` (read at each run, see SchedulerOptions)."""

    def __init__(self, store: LockStore, options: SchedulerOptions, schedules: Schedules, health: StoreHealth,
                 reports: Reports) -> None:
        self.store, self.options, self.schedules, self.health = store, options, schedules, health
        self.reports = reports
        self.offload = Offload(None)  # where run_on="tasks" bodies go: the Scheduler's tasks= option
        self.releases = Releases(store)  # bodies that end at once release together
        self.waits = BusyWaits(store, options.name)  # busy fires asking again, each job's ticks in order

    def execute(self, fire: Fire) -> RunRecord | None:
        """One fire in the caller's thread, as a batch of one whose every step runs here: acquire, run, release,
        report; its record (None for a lock won after shutdown began, released unrun)."""
        records: list[RunRecord | None] = []
        self.execute_many([(fire, records.append)], _here)
        return records[0] if records else None

    def execute_many(self, fires: Sequence[tuple[Fire, Done]], hand_off: HandOff) -> None:
        """Fires due together, each with its ``done``: their locks asked for with one :meth:`LockStore.acquire_many`
        (one round trip on a store that batches). Each body to run is handed off (to a worker thread, or run here
        by :meth:`execute`), then the busy fires together to one more; the skips are recorded here. Each fire's
        ``done(record)`` is called once it is over (None: no record, it was not run nor skipped)."""
        started_at = _utc_now()
        try:
            results = self.waits.ask([fire for fire, _ in fires])
        except StoreUnavailable as error:  # a store's acquire_many answers per fire; this is belt and braces
            results = [error] * len(fires)
        inline, waiting = [], []  # skips recorded here; busy fires waited out together in one worker thread
        for (fire, done), result in zip(fires, results, strict=True):
            if isinstance(result, Acquisition) and result.status is AcquireStatus.BUSY:
                plan = busy_plan(fire, self.options.busy_grace)
                if plan.slot:
                    self._hand_off_wait(fire, result, started_at, done, hand_off)
                    continue
                if plan.patience > timedelta(0):
                    waiting.append(Waiting(fire, result, time.monotonic() + plan.patience.total_seconds(), done))
                    continue
            if isinstance(result, Acquisition) and result.acquired:
                self._hand_off_run(Waiting(fire, result, 0.0, done), started_at, hand_off)
            else:
                inline.append((fire, done, result))
        if waiting and not hand_off(functools.partial(self._wait_out_together, waiting, started_at, hand_off)):
            for busy in waiting:  # no worker takes calls any more: shutdown closed the pool
                busy.done(None)
        for fire, done, result in inline:
            self._decide_then(done, fire, result, started_at)

    def run_missed(self, life: Generation, job: Job, before: datetime | None) -> datetime | None:
        """Run ``job``'s missed ticks (control.missed_ticks) before ``before``, oldest first, each through the
        once-per-fire acquire; the last one asked for (None: none)."""
        try:
            state = require_control(self.store, "catch up missed ticks").lock(job.name)
        except StoreUnavailable as error:
            self.health.failed(error)  # due again once the store is back
            return None
        self.health.ok()
        if state is None:
            return None
        # The ticks and their version come from the document just read, never from this instance's copy,
        # so that no tick of a schedule replaced meanwhile is caught up.
        self.schedules.apply(job, state)
        ticks = missed_ticks(job, state, self.schedules.trigger_for(job, state), now=self.options.now(),
                             before=before)
        if ticks:
            logger.info("job %r: catching up %d missed tick(s) (catch_up=%r) from %s", job.name, len(ticks),
                        job.catch_up, ticks[0].isoformat())
        for tick in ticks:
            if life.closing.is_set():
                return None
            self.execute(Fire(job, tick, state.schedule_version, life, FireKind.CATCH_UP))
        return ticks[-1] if ticks else None

    def _hand_off_run(self, won: Waiting, started_at: datetime, hand_off: HandOff) -> None:
        """A won fire's body to a worker thread; if none takes calls any more (shutdown), its lock released unrun."""
        if hand_off(functools.partial(self._handed_off, won, started_at)):
            return
        assert won.acquisition.token is not None
        self._release_unrun(won.fire, won.fire.context(self.options.name(), won.acquisition.token))
        won.done(None)

    def _hand_off_wait(self, fire: Fire, busy: Acquisition, started_at: datetime, done: Done,
                       hand_off: HandOff) -> None:
        """A busy tick that keeps its job's slot (:mod:`.overlap`) waits in a worker thread of its own."""
        def wait() -> None:
            self._decide_then(done, fire, Overlap(self.store, self.options.name()).wait(fire, busy), started_at)

        if not hand_off(wait):
            done(None)  # no worker takes calls any more: shutdown closed the pool

    def _wait_out_together(self, waiting: list[Waiting], started_at: datetime, hand_off: HandOff) -> None:
        """The busy fires of one batch, in one worker thread, so that a dead holder's locks do not take a worker
        thread per job: asked again together, each handed off or recorded once decided."""
        self.waits.ask_again(waiting, functools.partial(self._conclude, started_at=started_at, hand_off=hand_off))

    def _conclude(self, busy: Waiting, *, started_at: datetime, hand_off: HandOff) -> None:
        """A waited-out fire of a batch, decided: its body handed off, or its skip recorded; ``done()`` called."""
        if busy.error is None and busy.acquisition.acquired:
            self._hand_off_run(busy, started_at, hand_off)
            return
        self._decide_then(busy.done, busy.fire, busy.error or busy.acquisition, started_at)

    def _handed_off(self, won: Waiting, started_at: datetime) -> None:
        """A won fire of :meth:`execute_many`, where it was handed off: its body run, its lock released."""
        self._decide_then(won.done, won.fire, won.acquisition, started_at)

    def _decide_then(self, done: Done, fire: Fire, acquisition: Buffered, started_at: datetime) -> None:
        """:meth:`_decided`, then ``done(record)`` whatever happens (None if it raised)."""
        record = None
        try:
            record = self._decided(fire, acquisition, started_at)
        finally:
            done(record)

    def _decided(self, fire: Fire, acquisition: Buffered, started_at: datetime) -> RunRecord | None:
        """What the store answered (or that it could not be asked): skip and record why, or run the body."""
        job, fire_time = fire.job, fire.time

        def skipped(outcome: Outcome, why: str) -> RunRecord:
            return self._finish(RunRecord(job.name, fire_time, self.options.name(), outcome, started_at, _utc_now(),
                                          error=why, manual=fire.manual, catch_up=fire.catch_up,
                                          backfill=fire.backfill))

        if isinstance(acquisition, Skip):  # an overlap slot's wait ended without the lock
            return skipped(acquisition.outcome, acquisition.why)
        if isinstance(acquisition, StoreUnavailable):
            self.health.failed(acquisition)
            return skipped(Outcome.SKIPPED_STORE_ERROR, str(acquisition))
        self.health.ok()
        status = acquisition.status
        if status is AcquireStatus.PAUSED:
            if logger.isEnabledFor(logging.DEBUG):  # a skip is the usual answer: no isoformat() unless logged
                logger.debug("job %r fire %s skipped: paused", job.name, fire_time.isoformat())
            return skipped(Outcome.SKIPPED_PAUSED, "the job is paused")
        if status is AcquireStatus.STALE_SCHEDULE:
            return self._stale(fire, skipped)
        if status is AcquireStatus.ALREADY_RAN:
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("job %r fire %s already ran elsewhere", job.name, fire_time.isoformat())
            return skipped(Outcome.SKIPPED_ALREADY_RAN, "this fire already ran")
        if status is AcquireStatus.BUSY:
            skip = busy_skip(fire, acquisition)
            return skipped(skip.outcome, skip.why)
        assert acquisition.token is not None
        refused = self._gate(fire)
        if refused is not None:
            self._release(job, acquisition.token)
            return skipped(refused.outcome, refused.why)
        ctx = fire.context(self.options.name(), acquisition.token)
        if not fire.life.admit(ctx):
            self._release_unrun(fire, ctx)
            return None
        if job.run_on == "tasks":
            return self._hand_over(fire, ctx, started_at)
        return self._run_body(fire, ctx, started_at)

    def _hand_over(self, fire: Fire, ctx: JobContext, started_at: datetime) -> RunRecord:
        """A ``run_on="tasks"`` body enqueued, its lock kept for the worker (:mod:`mutexcron.tasks.job_runs`);
        released as failed if the enqueue failed."""
        task = JobTask(tick_task_id(fire.job.name, fire.time, manual=fire.manual), fire.job.name, fire.time, ctx.token,
                       catch_up=fire.catch_up, manual=fire.manual, enqueued_by=ctx.instance_id,
                       schedule_version=fire.version)
        try:
            record, enqueued = self.offload.hand_over(fire.job, task, started_at)
        finally:
            fire.life.done(ctx)
        if not enqueued and self._release(fire.job, ctx.token, Outcome.FAILED, record.error):
            count_failure(self.store, fire.job, record.error, instance_id=self.options.name(),
                          notify=self.reports.listeners.notify)
        return self._finish(record)

    def _gate(self, fire: Fire) -> Skip | None:
        """Whether a fire whose lock is won runs (None) or is skipped: too late for its job's ``start_deadline``
        (a scheduled tick: not a manual run, a catch-up or a backfill, late by design), else its gate's answer (a
        store the gate cannot ask is a skip for a store error)."""
        late = late_start(fire.job, fire.time, self.options.now()) if fire.scheduled else None
        if late is not None:
            logger.warning("job %r fire %s skipped: %s", fire.job.name, fire.time.isoformat(), late)
            return Skip(Outcome.SKIPPED_LATE, late)
        if fire.gate is None:
            return None
        try:
            return fire.gate()
        except StoreUnavailable as error:
            self.health.failed(error)
            return Skip(Outcome.SKIPPED_STORE_ERROR, str(error))

    def _stale(self, fire: Fire, skipped: Callable[[Outcome, str], RunRecord]) -> RunRecord | None:
        """The store's schedule changed since this instance last read it: follow it now, and run the tick
        if the new schedule (as just read, not this instance's copy) has it too (each tick still once); a manual
        run, with the new definition, unless it was removed."""
        job, fire_time = fire.job, fire.time
        try:  # only a store with the control plane changes schedules
            state = require_control(self.store, "follow a schedule change").lock(job.name)
        except StoreUnavailable as error:
            self.health.failed(error)
            return skipped(Outcome.SKIPPED_STORE_ERROR, str(error))
        current = self.schedules.follow(job, state)
        if current is not None and state is not None and (fire.manual or self.schedules.trigger_for(
                current, state).next_after(fire_time - _ONE_MICROSECOND) == fire_time):
            return self.execute(dataclasses.replace(fire, job=current, version=state.schedule_version))
        if current is None and job.runtime:
            logger.info("job %r fire %s skipped: its run-time schedule was removed", job.name, fire_time.isoformat())
            return skipped(Outcome.SKIPPED_STALE_SCHEDULE, "the run-time schedule was removed")
        logger.info("job %r fire %s skipped: not a tick of its new schedule", job.name, fire_time.isoformat())
        return skipped(Outcome.SKIPPED_STALE_SCHEDULE, "the schedule changed; this is not a tick of the new one")

    def _run_body(self, fire: Fire, ctx: JobContext, started_at: datetime) -> RunRecord | None:
        """The body run (:func:`~mutexcron.running.body.run_body`), its lock released here with its outcome."""
        job, life = fire.job, fire.life

        def settle(outcome: Outcome, error: str | None, beat: Beat) -> bool:
            if not life.finalized:
                return self._release(job, ctx.token, outcome, error)
            logger.warning("job %r (fire %s) ended after shutdown gave up waiting for it; its lock expires with its "
                           "lease", job.name, ctx.fire_time.isoformat())
            return False

        started = RunRecord(job.name, ctx.fire_time, self.options.name(), None, started_at, None, token=ctx.token,
                            manual=fire.manual, catch_up=ctx.catch_up, backfill=ctx.backfill)
        kit = BodyKit(self.store, life.heartbeats, life.pings, self.reports)
        return run_body(job, ctx, started, kit, settle, settled=functools.partial(life.done, ctx))

    def _release_unrun(self, fire: Fire, ctx: JobContext) -> None:
        """A lock won after shutdown stopped waiting for the fires in flight: give it back at once without
        running the body. The store already counts this tick as taken, so no instance runs it; it is logged,
        not recorded as a run."""
        if fire.life.finalized:
            logger.warning("job %r: fire %s won its lock after shutdown finished; not run, the lock expires "
                           "with its lease", fire.job.name, ctx.fire_time.isoformat())
            return
        logger.warning("job %r: fire %s won its lock after shutdown stopped waiting; released without running it",
                       fire.job.name, ctx.fire_time.isoformat())
        self._release(fire.job, ctx.token)

    def _release(self, job: Job, token: int, outcome: Outcome | None = None, error: str | None = None) -> bool:
        """Give the lock back, with the run's outcome for alerts (None: the body did not run); whether it was
        still this run's."""
        try:
            released = self.releases.release(ReleaseRequest(job.name, token, job.hold_at_least,
                                                            None if outcome is None else str(outcome), error))
        except StoreUnavailable as failure:
            self.health.failed(failure)
            logger.error("job %r: could not release its lock (it expires with its lease): %s", job.name, failure)
            return False
        if not released:
            logger.warning("job %r: lock (token %d) was no longer ours at release; left untouched", job.name, token)
        return released

    def _finish(self, record: RunRecord) -> RunRecord:
        if record.outcome is Outcome.SKIPPED_STORE_ERROR:
            self.health.skipped()
        self.reports.finished(record)
        return record

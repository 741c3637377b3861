"""One fire of one job on this instance, the one way every run goes: acquire the lock (refused while
paused, for a stale schedule, for a tick already taken, while busy), run the body under the heartbeats,
release, tell the listeners. The scheduler decides *when*; this decides *whether* and does it."""

from __future__ import annotations

import functools
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .errors import StoreUnavailable
from .fire_batch import HandOff
from .health import StoreHealth
from .lifecycle import Generation
from .listeners import Listeners
from .records import JobContext, Outcome, RunRecord
from .registry import Job
from .schedules import Schedules
from .stores import AcquireRequest, AcquireStatus, Acquisition, LockStore
from .telemetry import Telemetry

__all__ = ["Runs"]

logger = logging.getLogger("mutexcron.scheduler")
_ONE_MICROSECOND = timedelta(microseconds=1)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _nothing() -> None:
    return None


@dataclass
class _Waiting:
    """A fire that found its lock busy, asking again while its patience lasts (:meth:`Runs._ask_again`);
    ``fire_time`` None for a manual run."""

    job: Job
    fire_time: datetime | None
    version: int | None
    acquisition: Acquisition
    deadline: float  # time.monotonic() when its patience ends
    done: Callable[[], None] = _nothing
    error: StoreUnavailable | None = None
    concluded: bool = False  # handed to conclude() (once, whatever goes wrong)

    def waits(self, now: float) -> bool:
        """Still to ask again: busy, no store error, patience left."""
        return self.error is None and self.acquisition.status is AcquireStatus.BUSY and now < self.deadline


class Runs:
    """Runs fires for one scheduler; ``instance_id()`` names this instance (read at each run, see Scheduler)."""

    def __init__(self, store: LockStore, *, instance_id: Callable[[], str], busy_grace: timedelta,
                 listeners: Listeners, health: StoreHealth, schedules: Schedules, telemetry: Telemetry,
                 succeeded: Callable[[str], None]) -> None:
        self.store, self.instance_id, self.busy_grace = store, instance_id, busy_grace
        self.listeners, self.health, self.schedules = listeners, health, schedules
        self.telemetry, self._succeeded = telemetry, succeeded

    def execute(self, life: Generation, job: Job, fire_time: datetime, *, manual: bool, version: int | None = None,
                 catch_up: bool = False) -> RunRecord | None:
        """Acquire, run, release, notify; None for a lock won after shutdown began (released unrun)."""
        started_at = _utc_now()
        try:
            acquisition: Acquisition | StoreUnavailable = self._acquire(
                life, job, None if manual else fire_time, version, patient=catch_up)
        except StoreUnavailable as error:
            acquisition = error
        return self._decided(life, job, fire_time, acquisition, started_at, manual=manual, version=version,
                             catch_up=catch_up)

    def execute_many(self, life: Generation, fires: Sequence[tuple[Job, datetime, int | None, Callable[[], None]]],
                     hand_off: HandOff) -> None:
        """Scheduled fires due together, (job, fire time, schedule version, ``done``): their locks asked for with one
        :meth:`LockStore.acquire_many` (one round trip on a store that batches). Each body to run is handed off to
        a worker thread, then the busy fires to one more that waits them out together; the skips are recorded
        here. Each fire's ``done()`` is called once it is over."""
        started_at = _utc_now()
        owner = self.instance_id()
        try:
            results = self.store.acquire_many([AcquireRequest(job.name, owner, job.lease, fire_time, version)
                                               for job, fire_time, version, _ in fires])
        except StoreUnavailable as error:  # a store's acquire_many answers per fire; this is belt and braces
            results = [error] * len(fires)
        inline, waiting = [], []  # skips recorded here; busy fires waited out together in one worker thread
        for (job, fire_time, version, done), result in zip(fires, results, strict=True):
            patience = self._patience(job, fire_time)
            if (isinstance(result, Acquisition) and result.status is AcquireStatus.BUSY
                    and patience is not None and patience > timedelta(0)):
                deadline = time.monotonic() + patience.total_seconds()
                waiting.append(_Waiting(job, fire_time, version, result, deadline, done))
            elif isinstance(result, Acquisition) and result.acquired:
                self._hand_off_run(life, job, fire_time, version, result, started_at, done, hand_off)
            else:
                inline.append((job, fire_time, version, done, result))
        if waiting and not hand_off(functools.partial(self._wait_out_together, life, waiting, started_at, hand_off)):
            for fire in waiting:  # no worker takes calls any more: shutdown closed the pool
                fire.done()
        for job, fire_time, version, done, result in inline:
            try:
                self._decided(life, job, fire_time, result, started_at, manual=False, version=version)
            finally:
                done()

    def _hand_off_run(self, life: Generation, job: Job, fire_time: datetime, version: int | None,
                      acquisition: Acquisition, started_at: datetime, done: Callable[[], None],
                      hand_off: HandOff) -> None:
        """A won fire's body to a worker thread; if none takes calls any more (shutdown), its lock released unrun."""
        if hand_off(functools.partial(self._handed_off, life, job, fire_time, version, acquisition, started_at,
                                      done)):
            return
        assert acquisition.token is not None
        self._release_unrun(life, job, JobContext(job.name, fire_time, self.instance_id(), acquisition.token))
        done()

    def _wait_out_together(self, life: Generation, waiting: list[_Waiting], started_at: datetime,
                           hand_off: HandOff) -> None:
        """The busy fires of one batch, in one worker thread, so that a dead holder's locks do not take a worker
        thread per job: asked again together, each handed off or recorded once decided."""
        self._ask_again(life, waiting, functools.partial(self._conclude, life, started_at=started_at,
                                                           hand_off=hand_off))

    def _ask_again(self, life: Generation, waiting: list[_Waiting], conclude: Callable[[_Waiting], None]) -> None:
        """Ask again for busy fires, together (one ``acquire_many`` a round), backing off from 20 ms to 1 s, while
        each is busy and within its patience; ``conclude(fire)`` once for each, when decided or when the wait ends
        (shutdown began, or an unexpected error)."""
        def settle(fire: _Waiting) -> None:
            fire.concluded = True
            conclude(fire)

        pause = 0.02
        try:
            while True:
                now = time.monotonic()
                for fire in [fire for fire in waiting if not fire.waits(now)]:
                    settle(fire)
                waiting = [fire for fire in waiting if not fire.concluded]
                if not waiting or life.closing.wait(min(pause, max(0.0, min(w.deadline for w in waiting) - now))):
                    break
                pause = min(pause * 2, 1.0)
                answers = self.store.acquire_many([AcquireRequest(w.job.name, self.instance_id(), w.job.lease,
                                                                  w.fire_time, w.version) for w in waiting])
                for fire, answer in zip(waiting, answers, strict=True):
                    if isinstance(answer, StoreUnavailable):
                        fire.error = answer  # decided: recorded as the fire's outcome
                    else:
                        fire.acquisition = answer
        finally:
            for fire in waiting:
                if not fire.concluded:
                    settle(fire)

    def _conclude(self, life: Generation, fire: _Waiting, *, started_at: datetime, hand_off: HandOff) -> None:
        """A waited-out fire of a batch, decided: its body handed off, or its skip recorded; ``done()`` called."""
        assert fire.fire_time is not None  # a batch holds scheduled fires only
        if fire.error is None and fire.acquisition.acquired:
            self._hand_off_run(life, fire.job, fire.fire_time, fire.version, fire.acquisition, started_at,
                               fire.done, hand_off)
            return
        try:
            self._decided(life, fire.job, fire.fire_time, fire.error or fire.acquisition, started_at, manual=False,
                          version=fire.version)
        finally:
            fire.done()

    def _handed_off(self, life: Generation, job: Job, fire_time: datetime, version: int | None,
                    acquisition: Acquisition, started_at: datetime, done: Callable[[], None]) -> None:
        """A won fire of :meth:`execute_many`, in a worker thread: its body run, its lock released."""
        try:
            self._decided(life, job, fire_time, acquisition, started_at, manual=False, version=version)
        finally:
            done()

    def _decided(self, life: Generation, job: Job, fire_time: datetime, acquisition: Acquisition | StoreUnavailable,
                 started_at: datetime, *, manual: bool, version: int | None, catch_up: bool = False
                 ) -> RunRecord | None:
        """What the store answered (or that it could not be asked): skip and record why, or run the body."""

        def skipped(outcome: Outcome, why: str) -> RunRecord:
            return self._finish(RunRecord(job.name, fire_time, self.instance_id(), outcome, started_at, _utc_now(),
                                          error=why, manual=manual, catch_up=catch_up))

        if isinstance(acquisition, StoreUnavailable):
            self.health.failed(acquisition)
            return skipped(Outcome.SKIPPED_STORE_ERROR, str(acquisition))
        self.health.ok()
        status = acquisition.status
        if status is AcquireStatus.PAUSED:
            logger.debug("job %r fire %s skipped: paused", job.name, fire_time.isoformat())
            return skipped(Outcome.SKIPPED_PAUSED, "the job is paused")
        if status is AcquireStatus.STALE_SCHEDULE:
            return self._stale(life, job, fire_time, skipped, manual=manual, catch_up=catch_up)
        if status is AcquireStatus.ALREADY_RAN:
            logger.debug("job %r fire %s already ran elsewhere", job.name, fire_time.isoformat())
            return skipped(Outcome.SKIPPED_ALREADY_RAN, "this fire already ran")
        if status is AcquireStatus.BUSY:
            why = f"lock held by {acquisition.holder or 'another instance'}"
            log = logger.error if job.on_busy == "raise" else logger.info
            log("job %r fire %s skipped: %s", job.name, fire_time.isoformat(), why)
            return skipped(Outcome.SKIPPED_BUSY, why)
        assert acquisition.token is not None
        ctx = JobContext(job.name, fire_time, self.instance_id(), acquisition.token, catch_up=catch_up)
        if not life.admit(ctx):
            self._release_unrun(life, job, ctx)
            return None
        return self._run_body(life, job, ctx, started_at, manual)

    def _stale(self, life: Generation, job: Job, fire_time: datetime, skipped: Callable[[Outcome, str], RunRecord],
               *, manual: bool, catch_up: bool) -> RunRecord | None:
        """The store's schedule changed since this instance last read it: follow it now, and run the tick
        if the new schedule (as just read, not this instance's copy) has it too (each tick still once)."""
        try:
            state = self.store.lock(job.name)
        except StoreUnavailable as error:
            self.health.failed(error)
            return skipped(Outcome.SKIPPED_STORE_ERROR, str(error))
        if state is not None:
            self.schedules.apply(job, state, force=True)  # the store's word, even if its version went down
            if self.schedules.trigger_for(job, state).next_after(fire_time - _ONE_MICROSECOND) == fire_time:
                return self.execute(life, job, fire_time, manual=manual, version=state.schedule_version,
                                    catch_up=catch_up)
        logger.info("job %r fire %s skipped: not a tick of its new schedule", job.name, fire_time.isoformat())
        return skipped(Outcome.SKIPPED_STALE_SCHEDULE, "the schedule changed; this is not a tick of the new one")

    def _acquire(self, life: Generation, job: Job, fire_time: datetime | None, version: int | None, *,
                 patient: bool = False) -> Acquisition:
        acquisition = self.store.acquire(job.name, owner=self.instance_id(), lease=job.lease, fire_time=fire_time,
                                         schedule_version=version)
        return self._wait_out_busy(life, job, fire_time, version, acquisition, patient=patient)

    def _patience(self, job: Job, fire_time: datetime | None, patient: bool = False) -> timedelta | None:
        """How long a fire refused as BUSY keeps asking; None: it gives up at once."""
        if job.on_busy == "wait" or patient:
            # By then a live holder has released it or died. A catch-up waits too: giving up on a missed
            # tick while another instance still runs an older one could let a later tick overtake it.
            return job.lease
        if fire_time is not None:
            # BUSY means an earlier run holds the lock (a later one would be ALREADY_RAN). It may be just
            # finishing, e.g. an old tick run late by an instance whose clock is slow: give it busy_grace
            # rather than lose this tick to it.
            return self.busy_grace
        return None

    def _wait_out_busy(self, life: Generation, job: Job, fire_time: datetime | None, version: int | None,
                       acquisition: Acquisition, *, patient: bool = False) -> Acquisition:
        """One fire's :meth:`_ask_again`, in its own thread: the last answer (the store's error raised)."""
        patience = self._patience(job, fire_time, patient)
        if acquisition.status is not AcquireStatus.BUSY or patience is None:
            return acquisition
        fire = _Waiting(job, fire_time, version, acquisition, time.monotonic() + patience.total_seconds())
        self._ask_again(life, [fire], lambda fire: None)  # the answer is returned, not handed on
        if fire.error is not None:
            raise fire.error
        return fire.acquisition

    def _run_body(self, life: Generation, job: Job, ctx: JobContext, started_at: datetime,
                  manual: bool) -> RunRecord | None:
        fire_time, token = ctx.fire_time, ctx.token
        beat = life.heartbeats.add(job, ctx)
        if beat is None:  # shutdown gave up waiting (its timeout passed) just after admit(): not started
            life.done(ctx)
            logger.warning("job %r (fire %s): shutdown finished before its body started; not run, its lock "
                           "expires with its lease", job.name, fire_time.isoformat())
            return None
        if self.listeners.wants("started"):
            self.listeners.notify(RunRecord(job.name, fire_time, self.instance_id(), None, started_at, None,
                                            token=token, manual=manual, catch_up=ctx.catch_up), "started")
        outcome, error = Outcome.SUCCEEDED, None
        try:
            with self.telemetry.body(job, ctx):
                job.call(ctx)
        except Exception:
            outcome, error = Outcome.FAILED, traceback.format_exc()
            logger.exception("job %r (fire %s) failed", job.name, fire_time.isoformat())
        except BaseException:  # SystemExit, KeyboardInterrupt: released as failed (not as a success), then raised
            outcome, error = Outcome.FAILED, traceback.format_exc()
            raise
        finally:
            life.heartbeats.remove(beat)
            if life.finalized:
                logger.warning("job %r (fire %s) ended after shutdown gave up waiting for it; its lock expires "
                               "with its lease", job.name, fire_time.isoformat())
            else:
                self._release(job, token, outcome, error)
            life.done(ctx)
        record = RunRecord(job.name, fire_time, self.instance_id(), outcome, started_at, _utc_now(), error=error,
                           token=token, lock_lost=ctx.lock_lost, manual=manual, catch_up=ctx.catch_up)
        if outcome is Outcome.SUCCEEDED and logger.isEnabledFor(logging.INFO):
            logger.info("job %r (fire %s) succeeded in %.3fs", job.name, fire_time.isoformat(),
                        (record.finished_at - started_at).total_seconds())  # type: ignore[operator]
        life.pings.send(job.ping_url, record)  # after the release: a slow ping server never holds the lock
        if outcome is Outcome.SUCCEEDED:
            self._succeeded(job.name)
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

    def _release(self, job: Job, token: int, outcome: Outcome | None = None, error: str | None = None) -> None:
        """Give the lock back, with the run's outcome for alerts (None: the body did not run)."""
        try:
            released = self.store.release(job.name, token=token, hold_at_least=job.hold_at_least,
                                          outcome=None if outcome is None else str(outcome), error=error)
        except StoreUnavailable as error:
            self.health.failed(error)
            logger.error("job %r: could not release its lock (it expires with its lease): %s", job.name, error)
            return
        if not released:
            logger.warning("job %r: lock (token %d) was no longer ours at release; left untouched", job.name, token)

    def _finish(self, record: RunRecord) -> RunRecord:
        if record.outcome is Outcome.SKIPPED_STORE_ERROR:
            self.health.skipped()
        self.telemetry.finished(record)
        self.listeners.notify(record, "finished")
        return record

"""Backfill: an operator runs each tick of a job's schedule between two times, oldest first, each once across the
fleet however many backfills of that range run at once (:meth:`mutexcron.Scheduler.backfill`, docs/backfill.md).

The job's own tick ledger (its lock document's last fire time) cannot say which of these ticks ran: they are
usually before it. Each backfill keeps a ledger of its own instead, a lock document named from the job and the
range's first and last ticks (:func:`ledger_name`), whose last fire time is the newest tick a backfill of that
range took. Each tick goes the way every run goes (:class:`~mutexcron.scheduling.runs.Runs`): the job's lock,
taken as a manual run takes it (waiting up to a lease while the scheduled run holds it), then the tick claimed on
the ledger (the fire's gate), then the body, the release and the reports. A tick that another backfill took is
released unrun and recorded ``skipped_already_ran``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING

from ..cron import CronTrigger, iter_fire_times
from ..errors import JobDefinitionError, StoreUnavailable
from ..records import Outcome
from ..registry import MAX_NAME_LENGTH, validate_job_name
from ..stores import AcquireStatus, ControlStore, LockStore
from .fires import Fire, FireKind, Skip
from .schedules import Schedules

if TYPE_CHECKING:
    from ..registry import Job
    from .lifecycle import Generation
    from .runs import Runs

__all__ = ["MAX_TICKS", "Backfill", "backfill_ticks", "effective_trigger", "ledger_name", "run_backfill"]

logger = logging.getLogger("mutexcron.scheduler")
MAX_TICKS = 10_000  # the most ticks one backfill runs: a longer range is refused before anything runs
_ONE_MICROSECOND = timedelta(microseconds=1)
_STOPS = {Outcome.SKIPPED_PAUSED: "the job is paused", Outcome.SKIPPED_BUSY: "its lock stayed busy"}


def ledger_name(job_name: str, first: datetime, last: datetime) -> str:
    """The lock document that records which ticks from ``first`` to ``last`` (job ``job_name``'s) a backfill took:
    ``<job>@backfill:<hash of the job and both ticks>``, the job's name cut to keep it within the name limit."""
    key = f"{job_name}\n{first.astimezone(UTC).isoformat()}\n{last.astimezone(UTC).isoformat()}"
    suffix = f"@backfill:{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    return validate_job_name(job_name[:MAX_NAME_LENGTH - len(suffix)] + suffix)


def backfill_ticks(job_name: str, trigger: CronTrigger, start: object, end: object, now: datetime) -> list[datetime]:
    """The ticks of ``trigger`` from ``start`` (included) to ``end`` (excluded), aware UTC, oldest first;
    JobDefinitionError for a naive time, an empty or reversed range, an end after ``now`` (the store's clock: the
    live schedule runs the ticks from then on), or more than MAX_TICKS ticks."""
    for argument, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise JobDefinitionError(f"job {job_name!r}: backfill {argument}={value!r} must be an aware datetime "
                                     "(with a time zone or UTC offset)")
    assert isinstance(start, datetime) and isinstance(end, datetime)
    shown = f"from {start.isoformat()} to {end.isoformat()}"
    if end <= start:
        raise JobDefinitionError(f"job {job_name!r}: backfill {shown}: end must be after start")
    if end > now:
        at = now.astimezone(end.tzinfo).isoformat(timespec="seconds")
        raise JobDefinitionError(f"job {job_name!r}: backfill {shown}: end {end.isoformat()} is after the lock "
                                 f"store's now ({at}); the job's schedule runs the ticks from now on: end the "
                                 "range at the store's now at the latest")
    ticks: list[datetime] = []
    for tick in iter_fire_times(trigger, start - _ONE_MICROSECOND):
        if tick >= end:
            break
        if len(ticks) == MAX_TICKS:
            # More are not counted (a range of years of seconds would take minutes): the span so far says roughly.
            about = int((end - ticks[0]) / (tick - ticks[0]) * MAX_TICKS)
            raise JobDefinitionError(f"job {job_name!r}: backfill {shown} has more than {MAX_TICKS} ticks (about "
                                     f"{about}) on {trigger}; backfill at most {MAX_TICKS} at a time")
        ticks.append(tick.astimezone(UTC))
    return ticks


def run_backfill(runs: Runs, life: Generation, job: Job, start: datetime, end: datetime, by: str | None) -> int:
    """:meth:`mutexcron.Scheduler.backfill` in generation ``life``: the ticks worked out (refused before anything
    runs), then run; the number whose body ran."""
    trigger = effective_trigger(runs.store, job, runs.schedules.timezone)
    ticks = backfill_ticks(job.name, trigger, start, end, runs.store.now())
    shown = f"from {start.isoformat()} to {end.isoformat()}{f' (by {by})' if by else ''}"
    logger.info("job %r: backfilling %d tick(s) of %s %s", job.name, len(ticks), trigger, shown)
    ran = Backfill(runs, life, job, ticks).run()
    logger.info("job %r: backfill %s ran %d of %d tick(s)", job.name, shown, ran, len(ticks))
    return ran


def effective_trigger(store: LockStore, job: Job, default_zone: tzinfo) -> CronTrigger:
    """The schedule ``job`` fires on now, as the store says (an operator's override counts), not an instance's
    copy (a scheduler never started has none); its zone is the one a backfill's times without an offset are read
    in (``mutexcron backfill``)."""
    state = store.lock(job.name) if isinstance(store, ControlStore) else None
    return Schedules(default_zone, timedelta(0)).trigger_for(job, state) if state else job.trigger(default_zone)


class Backfill:
    """One backfill of ``job``'s ``ticks`` (from :func:`backfill_ticks`) in this thread, by ``runs``."""

    def __init__(self, runs: Runs, life: Generation, job: Job, ticks: list[datetime]) -> None:
        self.runs, self.life, self.job, self.ticks = runs, life, job, ticks
        self.ledger = ledger_name(job.name, ticks[0], ticks[-1]) if ticks else None

    def run(self) -> int:
        """Run each tick not taken yet, oldest first; the number whose body ran. It stops early (logged) once the
        job is paused, its lock stays busy for a lease, or the scheduler shuts down; StoreUnavailable once the
        store cannot be reached."""
        ran, index = 0, 0
        try:
            newest = self._ledger_tick()
            while index < len(self.ticks):
                tick = self.ticks[index]
                record = self.runs.execute(Fire(self.job, tick, None, self.life, FireKind.BACKFILL,
                                                gate=functools.partial(self._claim, tick)))
                outcome = record.outcome if record is not None else None  # None: shutdown took it unrun
                ran += outcome is not None and outcome.ran
                if outcome is None or self.life.closing.is_set():
                    logger.warning("job %r: backfill stopped by shutdown at %s", self.job.name, tick.isoformat())
                    break
                if outcome is Outcome.SKIPPED_STORE_ERROR:
                    raise StoreUnavailable(f"job {self.job.name!r}: backfill stopped at {tick.isoformat()} after "
                                           f"running {ran} tick(s): {record.error if record else ''}")
                if outcome is Outcome.SKIPPED_BUSY and newest != (newest := self._ledger_tick()):
                    continue  # another backfill of the range holds the job's lock, and gets on: wait on for it
                if outcome in _STOPS:
                    logger.warning("job %r: backfill stopped at %s after running %d tick(s): %s", self.job.name,
                                   tick.isoformat(), ran, (record.error if record else None) or _STOPS[outcome])
                    break
                index += 1
        finally:
            self._hide_ledger()
        return ran

    def _ledger_tick(self) -> datetime | None:
        """The newest tick a backfill of the range took, as the ledger says now (None on a store without the
        control plane, where a lock busy for a lease ends the backfill whoever holds it)."""
        store = self.runs.store
        if self.ledger is None or not isinstance(store, ControlStore):
            return None
        state = store.lock(self.ledger)
        return state.last_fire_time if state is not None else None

    def _claim(self, tick: datetime) -> Skip | None:
        """Take ``tick`` on the ledger (the job's lock is held): None if this backfill runs it, else why not. A
        ledger held by another backfill (one that lost the job's lock mid-claim) is waited for up to a lease."""
        store, ledger, lease = self.runs.store, self.ledger, self.job.lease
        assert ledger is not None
        deadline, pause = time.monotonic() + lease.total_seconds(), 0.02
        while True:
            if self.life.closing.is_set():  # the body would not start: leave the tick to a later backfill
                return Skip(Outcome.SKIPPED_BUSY, "the scheduler is shutting down")
            answer = store.acquire(ledger, owner=self.runs.options.name(), lease=lease, fire_time=tick)
            if answer.acquired:
                assert answer.token is not None
                try:  # the tick is ours now: its ledger need not stay locked
                    store.release(ledger, token=answer.token)
                except StoreUnavailable as error:
                    logger.warning("job %r: backfill ledger %r not released (its lease frees it): %s",
                                   self.job.name, ledger, error)
                return None
            if answer.status is AcquireStatus.ALREADY_RAN:
                return Skip(Outcome.SKIPPED_ALREADY_RAN, "another backfill of this range ran this tick")
            if answer.status is not AcquireStatus.BUSY or time.monotonic() >= deadline:
                return Skip(Outcome.SKIPPED_BUSY, f"backfill ledger {ledger!r}: {answer.status} "
                                                  f"({answer.holder or '-'})")
            self.life.closing.wait(pause)
            pause = min(pause * 2, 1.0)

    def _hide_ledger(self) -> None:
        """Hide the ledger's document (it keeps its last fire time: the same range run again resumes)."""
        store = self.runs.store
        if self.ledger is None or not isinstance(store, ControlStore):
            return
        try:
            store.delete(self.ledger)
        except StoreUnavailable as error:
            logger.warning("job %r: backfill ledger %r left visible: %s", self.job.name, self.ledger, error)

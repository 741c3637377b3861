"""The heartbeat registry: one thread per scheduler generation renews every lock its running bodies hold, and
tells a body that outlives its job's ``timeout`` to stop (docs/run-limits.md)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ..errors import StoreUnavailable
from ..records import JobContext
from ..registry import Job
from ..stores import ControlStore, LockStore, Renewal

__all__ = ["Beat", "Heartbeats"]

logger = logging.getLogger("mutexcron.scheduler")


@dataclass(eq=False)
class Beat:
    """One running body's lock, as the heartbeat thread sees it."""

    job: Job
    ctx: JobContext
    due: float  # time.monotonic() of the next renewal
    last_renewed: float
    in_flight: bool = False
    deadline: float | None = None  # time.monotonic() when the job's timeout passes (None: no timeout)
    timed_out: bool = False  # the deadline passed while the body ran: ctx.cancelled was set
    replaced: bool = False  # a newer tick asked it to stop (on_busy="replace"): ctx.cancelled was set

    def wake_at(self) -> float:
        """When the thread must next look at this beat: its renewal, or its deadline if that comes first."""
        if self.deadline is None or self.timed_out:
            return self.due
        return min(self.due, self.deadline)


class Heartbeats:
    """One thread that renews every lock it was given every ``lease / 3``, until :meth:`stop`.

    A run whose lock was taken away (its lease ran out and another instance took it) is marked lost
    and logged. A run past its job's ``timeout`` is told to stop (``ctx.cancelled``) and its lock is renewed no
    more, so that a body ignoring the signal holds it at most ``timeout + lease``. One shared thread instead of
    one per run keeps a short job's overhead low. Stopping is final: :meth:`add` then refuses, so a fire that was
    still acquiring when the scheduler shut down can never start a second thread (nor revive the first, which a
    shutdown would then wait for forever).
    """

    # When it holds no lock the thread still looks in once a second, so that adding a run whose first
    # renewal is further away than that needs no wake-up (a short job's start stays cheap).
    IDLE_WAKE = 1.0

    def __init__(self, store: LockStore) -> None:
        self._store = store
        self._changed = threading.Condition()
        self._beats: set[Beat] = set()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._wake_at = 0.0  # when the thread will next look at its beats (time.monotonic())

    @property
    def stopped(self) -> bool:
        return self._stopped

    def add(self, job: Job, ctx: JobContext) -> Beat | None:
        """Renew this run's lock from now on; None (and nothing renewed) once the registry is stopped."""
        now = time.monotonic()
        deadline = None if job.timeout is None else now + job.timeout.total_seconds()
        beat = Beat(job, ctx, now + job.lease.total_seconds() / 3, now, deadline=deadline)
        with self._changed:
            if self._stopped:
                return None
            self._beats.add(beat)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mutexcron-heartbeat", daemon=True)
                self._thread.start()
            elif beat.wake_at() < self._wake_at:
                self._changed.notify_all()
        return beat

    def remove(self, beat: Beat) -> None:
        """Stop renewing; waits for a renewal in flight so none lands after the lock's release.

        Once stopped it does not wait: a renewal still in flight then is one that outlived the shutdown.
        """
        with self._changed:
            self._changed.wait_for(lambda: not beat.in_flight or self._stopped)
            self._beats.discard(beat)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop for good and wait (at most ``timeout`` seconds) for the thread; False if it is still in a
        renewal then (a store call that hangs: the daemon thread ends when that call returns)."""
        with self._changed:
            self._stopped = True
            thread = self._thread
            self._changed.notify_all()
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._stopped:
                    now = time.monotonic()
                    self._time_out(now)
                    due = [beat for beat in self._beats if beat.due <= now]
                    if due:
                        break
                    self._wake_at = min((beat.wake_at() for beat in self._beats), default=now + self.IDLE_WAKE)
                    self._changed.wait(self._wake_at - now)
                if self._stopped:
                    return
                due = [beat for beat in due if not self._abandon(beat)]
                for beat in due:
                    beat.in_flight = True
            for beat in due:
                lost = self._renew(beat)
                with self._changed:
                    beat.in_flight = False
                    beat.due = time.monotonic() + beat.job.lease.total_seconds() / 3
                    if lost:
                        self._beats.discard(beat)
                    self._changed.notify_all()

    def _time_out(self, now: float) -> None:
        """Tell each body whose deadline passed to stop (called with the condition held)."""
        for beat in self._beats:
            if beat.deadline is not None and not beat.timed_out and beat.deadline <= now:
                beat.timed_out = True
                beat.ctx.cancelled.set()
                logger.warning("job %r (fire %s): still running after its timeout (%s): told to stop (ctx.cancelled)",
                               beat.job.name, beat.ctx.fire_time.isoformat(), beat.job.timeout)

    def _abandon(self, beat: Beat) -> bool:
        """True (and the beat dropped, its lock left to expire) for a renewal due after the body's timeout: a body
        that ignores the signal keeps its lock at most ``timeout + lease`` (called with the condition held).

        A renewal that fell due at or before the deadline (at the same instant, or the thread woke late) is
        renewed: the body was told to stop only now and has had no time to do so."""
        if not beat.timed_out or beat.deadline is None or beat.due <= beat.deadline:
            return False
        self._beats.discard(beat)
        logger.error("job %r (fire %s, token %d): the body still runs past its timeout (%s) and ignores "
                     "ctx.cancelled: its lock is no longer renewed and expires within its lease (%s), after which "
                     "the next tick may run on any instance", beat.job.name, beat.ctx.fire_time.isoformat(),
                     beat.ctx.token, beat.job.timeout, beat.job.lease)
        return True

    def _renew(self, beat: Beat) -> bool:
        """Renew one lock; True if it is lost."""
        job, ctx = beat.job, beat.ctx
        try:
            renewed = self._renew_once(beat)
        except StoreUnavailable as error:
            if time.monotonic() - beat.last_renewed < job.lease.total_seconds():
                logger.warning("job %r: could not renew its lock, will retry: %s", job.name, error)
                return False
            renewed = False
        if renewed:
            beat.last_renewed = time.monotonic()
            return False
        ctx._mark_lost()
        logger.error(
            "job %r (fire %s, token %d): lock lost while the body runs: its lease ran out and it may now be "
            "held by another instance", job.name, ctx.fire_time.isoformat(), ctx.token,
        )
        return True

    def _renew_once(self, beat: Beat) -> bool:
        """One renewal; for an ``on_busy="replace"`` job also whether a newer tick asks the body to stop."""
        job, ctx = beat.job, beat.ctx
        if job.on_busy != "replace" or not isinstance(self._store, ControlStore):
            return self._store.renew(job.name, token=ctx.token, lease=job.lease)
        renewal = self._store.renew_watching(job.name, token=ctx.token, lease=job.lease)
        if renewal is Renewal.STOP and not beat.replaced:
            beat.replaced = True
            ctx.cancelled.set()
            logger.warning("job %r (fire %s): a newer tick replaces this run (on_busy='replace'): told to stop "
                           "(ctx.cancelled); the newer tick runs once it released its lock", job.name,
                           ctx.fire_time.isoformat())
        return renewal is not Renewal.LOST

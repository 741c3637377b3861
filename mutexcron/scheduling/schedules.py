"""This instance's view of the fleet's schedules: which trigger each declared job fires on (the code's spec
or the operator's override in the store) and the schedule version it was built from, kept in step with the
lock documents by a thread that reads them every ``sync_interval``."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta, tzinfo
from typing import TYPE_CHECKING

from ..cron import CronTrigger
from ..errors import CronSpecError, StoreUnavailable
from ..ops.control import effective_trigger
from ..stores import ControlStore
from .triggers import ShiftedTrigger, VersionedTrigger

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler
    from apscheduler.triggers.base import BaseTrigger

    from ..ops.health import StoreHealth
    from ..registry import Job
    from ..stores import LockState, LockStore

__all__ = ["ScheduleSync", "Schedules", "read_states"]

logger = logging.getLogger("mutexcron.scheduler")


class Schedules:
    """Each job's effective trigger and schedule version, as last read from the store (a job this scheduler
    never built has no version: its run_tick() is not checked)."""

    def __init__(self, timezone: tzinfo, clock_skew: timedelta,
                 resolve: Callable[[Job, LockState | None], Job | None] = lambda job, state: job) -> None:
        self.timezone, self.clock_skew = timezone, clock_skew
        self._resolve = resolve  # a job as a document defines it now (a run-time schedule's; None: removed)
        self._lock = threading.Lock()
        self._current: dict[str, tuple[int | None, CronTrigger]] = {}
        self._aps: BaseScheduler | None = None
        self._fire: Callable[..., None] | None = None  # what APScheduler calls for a job (the locking executor's)

    def attach(self, aps: BaseScheduler | None, fire: Callable[..., None] | None = None) -> None:
        """Reschedule jobs of ``aps`` from now on when their version changes, and add run-time schedules to it as
        jobs calling ``fire`` (None: stop doing so)."""
        with self._lock:
            self._aps, self._fire = aps, fire

    def version(self, name: str) -> int | None:
        with self._lock:
            current = self._current.get(name)
        return current[0] if current is not None else None

    def trigger(self, job: Job) -> CronTrigger:
        """The effective trigger of ``job`` (not skewed, not versioned): for catch-up and stale fires."""
        with self._lock:
            current = self._current.get(job.name)
        return current[1] if current is not None else job.trigger(self.timezone)

    def build(self, job: Job, state: LockState | None) -> BaseTrigger:
        """Remember ``job``'s schedule from ``state`` and return the trigger for APScheduler."""
        # A document not read (the store is down at start) is taken as version 0, "never overridden": if the
        # store has an override, the first acquire is refused as stale and this instance follows it then.
        version = state.schedule_version if state is not None else 0
        cron = self._effective(job, state)
        with self._lock:
            self._current[job.name] = (version, cron)
        trigger: BaseTrigger = ShiftedTrigger(cron, self.clock_skew) if self.clock_skew else cron
        return VersionedTrigger(trigger, version)

    def trigger_for(self, job: Job, state: LockState) -> CronTrigger:
        """The effective trigger of ``job`` by ``state`` itself (what a decision on that document must use:
        this instance's copy may be a sync behind or ahead of it)."""
        return self._effective(job, state)

    def follow(self, job: Job, state: LockState | None) -> Job | None:
        """After a stale refusal: ``job`` as ``state`` defines it, fired on by its version whatever this instance
        had; None if ``state`` removed it (a run-time schedule) or there is no visible document (None)."""
        current = self._resolve(job, state)
        if current is not None and state is not None:
            self.apply(current, state, force=True)  # the store's word, even if its version went down
        return current

    def drop(self, name: str) -> None:
        """Stop firing ``name`` (a run-time schedule removed)."""
        with self._lock:
            self._current.pop(name, None)
            aps = self._aps
        if aps is not None:
            with contextlib.suppress(LookupError):  # JobLookupError: not added, or dropped already
                aps.remove_job(name)

    def apply(self, job: Job, state: LockState, *, force: bool = False) -> bool:
        """Follow ``state``'s schedule version if it is newer than the one this instance fires on (any other
        with ``force``: a document read after a stale refusal, which may have been recreated); True if it
        changed (the job is rescheduled at once when the scheduler runs). An older read, such as a sync that
        raced a stale refusal, is ignored."""
        with self._lock:
            current = self._current.get(job.name)
            if current is not None and current[0] is not None and (
                    current[0] == state.schedule_version or (current[0] > state.schedule_version and not force)):
                return False
        trigger = self.build(job, state)
        with self._lock:
            aps, fire = self._aps, self._fire
        if aps is not None and fire is not None:
            try:
                if current is None:  # a run-time schedule this instance did not fire on yet
                    aps.add_job(fire, trigger=trigger, id=job.name, name=job.name,
                                replace_existing=True)
                else:
                    aps.reschedule_job(job.name, trigger=trigger)
            except LookupError:  # JobLookupError: the scheduler is shutting down and dropped it
                return False
        logger.info("job %r now fires on %s (schedule version %d)", job.name, self.trigger(job),
                    state.schedule_version)
        return True

    def _effective(self, job: Job, state: LockState | None) -> CronTrigger:
        try:
            return effective_trigger(job, state, self.timezone)
        except (CronSpecError, ValueError) as error:  # the store holds what no check here let through
            logger.error("job %r: the store's schedule override %r is unusable (%s); firing on the code's %r",
                         job.name, state.schedule if state else None, error, job.spec.expression)
            return job.trigger(self.timezone)


def read_states(store: LockStore, health: StoreHealth) -> dict[str, LockState] | None:
    """Every lock document, by name; None (and the outage noted in ``health``) if the store cannot be read. A
    store without the control plane has none to read: it is pinged, to notice an outage and its end."""
    try:
        if isinstance(store, ControlStore):
            states = {state.name: state for state in store.locks()}
        else:
            store.ping()
            states = {}
    except StoreUnavailable as error:
        health.failed(error)
        return None
    health.ok()
    return states


class ScheduleSync:
    """A daemon thread that calls ``poll()`` every ``interval`` seconds, or at once after :meth:`wake`, until
    :meth:`stop` or ``closing`` is set."""

    def __init__(self, interval: float, poll: Callable[[], None], closing: threading.Event) -> None:
        self._interval, self._poll, self._closing = interval, poll, closing
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="mutexcron-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> bool:
        """Stop and join within ``timeout`` seconds; False if the thread is stuck in a store call."""
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        next_poll = time.monotonic() + self._interval
        while not (self._stopped or self._closing.is_set()):
            woken = self._wake.wait(max(0.0, next_poll - time.monotonic()))
            self._wake.clear()
            if self._stopped or self._closing.is_set():
                return
            if woken or time.monotonic() >= next_poll:
                next_poll = time.monotonic() + self._interval
                try:
                    self._poll()
                except Exception:
                    logger.exception("mutexcron: reading the schedules from the store failed")

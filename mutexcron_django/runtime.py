"""The process's scheduler: built from settings, with run history, signals and fresh DB connections."""

from __future__ import annotations

import atexit
import logging
import os
from datetime import datetime, timedelta

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, router
from django.utils import timezone

from mutexcron import Outcome, RunRecord, Scheduler, StoreConfigError, default_registry
from mutexcron.ops.alerts import ALERT_EVENTS, Alert
from mutexcron.registry import BusyPolicy
from mutexcron.tasks import TaskQueue

from . import history, signals
from .conf import get_settings
from .models import JobRun
from .per_process import PerProcess, fresh_connections
from .sql.databases import NowAndThen, migrate_advice

logger = logging.getLogger("mutexcron.django")

_exit_hook_registered = False
_history_failing = False
PRUNE_EVERY = 3600.0  # seconds between automatic history prunes in one process
PRUNE_BUDGET = 1.0  # seconds one automatic prune may take (in batches); the next record goes on
_prunes = NowAndThen(PRUNE_EVERY)


def build_scheduler() -> Scheduler:
    """A new Scheduler configured from ``settings.MUTEXCRON`` with history and signals attached.

    Given the store's URL, the scheduler builds the store itself and closes it at shutdown.
    """
    conf = get_settings()
    try:
        scheduler = Scheduler(
            conf.store_spec,
            registry=default_registry,
            instance_id=conf.instance_id,
            timezone=conf.timezone,
            fire_context=fresh_connections,
            sync_interval=conf.sync_interval,
            max_workers=conf.max_workers,
            metrics=conf.metrics,
            tracing=conf.tracing,
            tasks=_task_queue,  # run_on="tasks" bodies go to this process's queue (MUTEXCRON["TASKS"])
        )
    except StoreConfigError as error:
        raise ImproperlyConfigured(f"MUTEXCRON['STORE']: {error}") from None
    scheduler.add_listener(send_signal, events=("started", "finished"))
    scheduler.add_listener(send_alert_signal, events=ALERT_EVENTS)
    scheduler.add_listener(record_history)
    return scheduler


def _task_queue() -> TaskQueue:
    """This process's task queue, built from ``MUTEXCRON["TASKS"]`` at the first ``run_on="tasks"`` fire."""
    from .tasks import get_task_queue

    return get_task_queue()


def run_now(name: str, *, on_busy: BusyPolicy | None = None) -> RunRecord:
    """Run job ``name`` (declared, or a run-time schedule of the store) now in this thread, under its lock, with
    history and signals (admin, commands).

    Raises :class:`~mutexcron.LockBusy` for a busy job whose policy is ``"raise"``.
    """
    scheduler = build_scheduler()
    try:
        return scheduler.run_now(name, on_busy=on_busy)
    finally:
        scheduler.shutdown()  # nothing runs any more: stops its heartbeat thread and closes its store


_scheduler = PerProcess(lambda: build_scheduler())  # its lock also guards starting it (start())


def get_scheduler() -> Scheduler:
    """This process's scheduler (a forked child gets a new one: threads do not survive a fork)."""
    return _scheduler.get()


def running_scheduler() -> Scheduler | None:
    """This process's scheduler if it was started and runs (never builds one)."""
    scheduler = _scheduler.peek()
    return scheduler if scheduler is not None and scheduler.running else None


def start() -> Scheduler:
    """Start this process's scheduler if it is not running; stops cleanly at interpreter exit."""
    global _exit_hook_registered
    scheduler = get_scheduler()
    with _scheduler.lock:
        if not scheduler.running:
            scheduler.start()
            logger.info("mutexcron scheduler started in process %d", os.getpid())
        if not _exit_hook_registered:
            atexit.register(stop)
            _exit_hook_registered = True
    return scheduler


def stop() -> None:
    """Stop this process's scheduler, waiting (bounded) for running jobs."""
    scheduler = _scheduler.take()
    if scheduler is not None and scheduler.running:
        scheduler.shutdown(wait=True)


def send_signal(record: RunRecord) -> None:
    if record.outcome is None:
        signal = signals.job_started
    elif record.outcome is Outcome.ENQUEUED:
        signal = signals.job_enqueued
    elif record.outcome.ran:
        signal = signals.job_finished
    else:
        signal = signals.job_skipped
    signal.send(sender=Scheduler, record=record)


def send_alert_signal(alert: Alert) -> None:
    """``job_overdue``, ``job_failing``, ``job_recovered`` or ``job_paused``, with the alert."""
    signal = {"overdue": signals.job_overdue, "failing": signals.job_failing, "recovered": signals.job_recovered,
              "paused": signals.job_paused}[alert.event]
    signal.send(sender=Scheduler, alert=alert)


def record_history(record: RunRecord) -> None:
    """Write the record to the history (:mod:`.history`: one JobRun row per tick, the other instances' fires
    folded into it); a database error is logged, never raised into the scheduler.

    A fire skipped because an operator paused the job is not a JobRun row: the pause is shown once (on the
    lock, and as one PauseSpan per episode), not as a skip per instance per tick."""
    try:
        # Each statement is a savepoint inside a caller's transaction (run_tick in a TestCase, run_now in
        # atomic()): a failed write must not leave that transaction unusable for the lock store's next queries.
        history.write(record)
        _prune_now_and_then()
    except DatabaseError as error:
        _history_failed(record, error)
    else:
        _history_ok()


def _history_failed(record: RunRecord, error: DatabaseError) -> None:
    """One warning per outage (like the scheduler's store errors), not one per fire; a missing table names the
    migrate command to run."""
    global _history_failing
    if not _history_failing:
        _history_failing = True
        reason = migrate_advice(error, router.db_for_write(JobRun)) or error
        logger.warning("could not record the %s run of job %r in the history (further failures are logged at "
                       "debug level until a write succeeds): %s", record.outcome, record.job_name, reason)
    else:
        logger.debug("could not record the %s run of job %r: %s", record.outcome, record.job_name, error)


def _history_ok() -> None:
    global _history_failing
    if _history_failing:
        _history_failing = False
        logger.info("run history is being recorded again")


def _prune_now_and_then() -> None:
    if _prunes.due() and not _prune(budget=PRUNE_BUDGET).complete:
        _prunes.again()  # more to delete: the next record goes on, a budget at a time


def prune_history(now: datetime | None = None) -> int:
    """Delete run history older than ``HISTORY_RETENTION`` (in batches); returns how many rows went."""
    return _prune(now).deleted


def _prune(now: datetime | None = None, *, budget: float | None = None) -> history.Pruned:
    retention: timedelta | None = get_settings().history_retention
    if retention is None:
        return history.Pruned(0, complete=True)
    return history.prune((now or timezone.now()) - retention, budget=budget)


__all__ = ["build_scheduler", "get_scheduler", "prune_history", "start", "stop"]

"""The process's scheduler: built from settings, with run history, signals and fresh DB connections."""

from __future__ import annotations

import atexit
import logging
import os
import time
from datetime import datetime, timedelta

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, router, transaction
from django.utils import timezone

from mutexcron import Outcome, RunRecord, Scheduler, StoreConfigError, default_registry
from mutexcron.alerts import ALERT_EVENTS, Alert
from mutexcron.registry import BusyPolicy

from . import signals
from .conf import get_settings
from .models import JobRun
from .per_process import PerProcess, fresh_connections

logger = logging.getLogger("mutexcron.django")

_exit_hook_registered = False
_last_prune: float | None = None
_history_failing = False
PRUNE_EVERY = 3600.0  # seconds between automatic history prunes in one process


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
            metrics=conf.metrics,
            tracing=conf.tracing,
        )
    except StoreConfigError as error:
        raise ImproperlyConfigured(f"MUTEXCRON['STORE']: {error}") from None
    scheduler.add_listener(send_signal, events=("started", "finished"))
    scheduler.add_listener(send_alert_signal, events=ALERT_EVENTS)
    scheduler.add_listener(record_history)
    return scheduler


def run_now(name: str, *, on_busy: BusyPolicy | None = None) -> RunRecord:
    """Run job ``name`` now in this thread, under its lock, with history and signals (admin, commands).

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
    elif record.outcome.ran:
        signal = signals.job_finished
    else:
        signal = signals.job_skipped
    signal.send(sender=Scheduler, record=record)


def send_alert_signal(alert: Alert) -> None:
    """``job_overdue``, ``job_failing`` or ``job_recovered``, with the alert."""
    signal = {"overdue": signals.job_overdue, "failing": signals.job_failing}.get(alert.event, signals.job_recovered)
    signal.send(sender=Scheduler, alert=alert)


def record_history(record: RunRecord) -> None:
    """Write the record to JobRun; a database error is logged, never raised into the scheduler.

    A fire skipped because an operator paused the job is not written: the pause is shown once (on the lock),
    not as a skip per instance per tick."""
    if record.outcome is Outcome.SKIPPED_PAUSED:
        return
    try:
        # A savepoint inside a caller's transaction (run_tick in a TestCase, run_now in atomic()): a failed
        # write must not leave that transaction unusable for the lock store's next queries.
        with transaction.atomic(using=router.db_for_write(JobRun)):
            JobRun.objects.create(
                job_name=record.job_name,
                fire_time=record.fire_time,
                instance_id=record.instance_id,
                outcome=str(record.outcome),
                started_at=record.started_at,
                finished_at=record.finished_at,
                error=record.error or "",
                token=record.token,
                lock_lost=record.lock_lost,
                manual=record.manual,
                catch_up=record.catch_up,
            )
            _prune_now_and_then()
    except DatabaseError as error:
        _history_failed(record, error)
    else:
        _history_ok()


def _history_failed(record: RunRecord, error: DatabaseError) -> None:
    """One warning per outage (like the scheduler's store errors), not one per fire."""
    global _history_failing
    if not _history_failing:
        _history_failing = True
        logger.warning("could not record the %s run of job %r in the history (further failures are logged at "
                       "debug level until a write succeeds): %s", record.outcome, record.job_name, error)
    else:
        logger.debug("could not record the %s run of job %r: %s", record.outcome, record.job_name, error)


def _history_ok() -> None:
    global _history_failing
    if _history_failing:
        _history_failing = False
        logger.info("run history is being recorded again")


def _prune_now_and_then() -> None:
    global _last_prune
    now = time.monotonic()
    if _last_prune is None or now - _last_prune >= PRUNE_EVERY:
        _last_prune = now
        prune_history()


def prune_history(now: datetime | None = None) -> int:
    """Delete run history older than ``HISTORY_RETENTION``; returns how many rows went."""
    retention: timedelta | None = get_settings().history_retention
    if retention is None:
        return 0
    cutoff = (now or timezone.now()) - retention
    deleted, _ = JobRun.objects.filter(started_at__lt=cutoff).delete()
    return deleted


__all__ = ["build_scheduler", "get_scheduler", "prune_history", "start", "stop"]

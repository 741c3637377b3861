"""The process's scheduler: built from settings, with run history, signals and fresh DB connections."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from mutexcron import RunRecord, Scheduler, default_registry

from . import signals
from .conf import get_settings
from .models import JobRun

logger = logging.getLogger("mutexcron.django")

_lock = threading.Lock()
_scheduler: Scheduler | None = None
_scheduler_pid: int | None = None
_exit_hook_registered = False
_last_prune = 0.0
PRUNE_EVERY = 3600.0  # seconds between automatic history prunes in one process


@contextmanager
def fresh_connections() -> Iterator[None]:
    """Around each fire: drop connections that died or outlived CONN_MAX_AGE, as Django does per request.

    Long-lived scheduler threads otherwise hit "server has gone away" (django-apscheduler's top bug).
    """
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()


def build_scheduler() -> Scheduler:
    """A new Scheduler configured from ``settings.MUTEXCRON`` with history and signals attached."""
    conf = get_settings()
    scheduler = Scheduler(
        conf.build_store(),
        registry=default_registry,
        instance_id=conf.instance_id,
        timezone=conf.timezone,
        fire_context=fresh_connections,
    )
    scheduler.add_listener(send_signal, events=("started", "finished"))
    scheduler.add_listener(record_history)
    return scheduler


def get_scheduler() -> Scheduler:
    """This process's scheduler (a forked child gets a new one: threads do not survive a fork)."""
    global _scheduler, _scheduler_pid
    with _lock:
        if _scheduler is None or _scheduler_pid != os.getpid():
            _scheduler, _scheduler_pid = build_scheduler(), os.getpid()
        return _scheduler


def start() -> Scheduler:
    """Start this process's scheduler if it is not running; stops cleanly at interpreter exit."""
    global _exit_hook_registered
    scheduler = get_scheduler()
    with _lock:
        if not scheduler.running:
            scheduler.start()
            logger.info("mutexcron scheduler started in process %d", os.getpid())
        if not _exit_hook_registered:
            atexit.register(stop)
            _exit_hook_registered = True
    return scheduler


def stop() -> None:
    """Stop this process's scheduler, waiting (bounded) for running jobs."""
    global _scheduler
    with _lock:
        scheduler = _scheduler if _scheduler_pid == os.getpid() else None
        _scheduler = None
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


def record_history(record: RunRecord) -> None:
    """Write the record to JobRun; a database error is logged, never raised into the scheduler."""
    try:
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
        )
        _prune_now_and_then()
    except DatabaseError as error:
        logger.warning("could not record the %s run of job %r in the history: %s", record.outcome,
                       record.job_name, error)


def _prune_now_and_then() -> None:
    global _last_prune
    now = time.monotonic()
    if now - _last_prune >= PRUNE_EVERY:
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

"""One body run, the same on a scheduler and on a ``run_on="tasks"`` worker: the heartbeat (lease renewal and
``timeout``), the ``"started"`` record, the ``/start`` ping, telemetry, the call, the verdict, the settling (each
side keeps the outcome and releases its own way), the failure count, the ``"finished"`` record and the ping.

One copy, so that a rule of a run (an ownership check, a limit, a report) holds wherever a body runs."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from ..errors import StoreUnavailable
from ..records import JobContext, Outcome, RunRecord
from .failures import count_failure
from .heartbeats import Beat, Heartbeats
from .limits import BodyEnd
from .pings import Pings

if TYPE_CHECKING:
    from ..listeners import Listeners
    from ..registry import Job
    from ..stores import LockStore
    from ..telemetry import Telemetry

__all__ = ["BodyKit", "Reports", "Settle", "run_body"]

SCHEDULER_LOG = logging.getLogger("mutexcron.scheduler")  # where a run logs unless its kit says otherwise
COUNTED = (Outcome.FAILED, Outcome.TIMED_OUT)  # the outcomes pause_on_failure counts


def _no_alerts(job_name: str) -> None:
    """A worker's runs close no alert themselves: the scheduler's alerts read the released outcome."""


@dataclass(frozen=True)
class Reports:
    """Where a run ends up: the listeners, the telemetry, and (``succeeded(job name)``) the alerts."""

    listeners: Listeners
    telemetry: Telemetry
    succeeded: Callable[[str], None] = _no_alerts

    def finished(self, record: RunRecord) -> None:
        """A fire's or a body's last word: its metrics and spans, then the ``"finished"`` listeners."""
        self.telemetry.finished(record)
        self.listeners.notify(record, "finished")


@dataclass(frozen=True)
class BodyKit:
    """What a body runs with on one scheduler generation or one task worker, and where its side logs."""

    store: LockStore
    heartbeats: Heartbeats
    pings: Pings
    reports: Reports
    log: logging.Logger = SCHEDULER_LOG


class Settle(Protocol):
    """Keep a body's outcome and give its lock back, as its side does; True if the run still held its lock then
    (its outcome is the tick's: a failure counts towards ``pause_on_failure``). Called once, also when the body
    raised a BaseException."""

    def __call__(self, outcome: Outcome, error: str | None, beat: Beat) -> bool: ...


@dataclass(frozen=True)
class _NotRun:
    outcome: Outcome
    error: str


def _unconfirmed(job: Job, ctx: JobContext, kit: BodyKit) -> _NotRun | None:
    """Why a body must not start (None: it may). A holder that took over a third of its lease to get from asking for
    the lock to its body (a long wait, or a process stopped in between: SIGSTOP, a GC pause, a frozen VM) renews it
    first, so that it never starts a body under a lease that ran out and another holder took; a store that cannot
    say fails closed."""
    if not ctx._asked or time.monotonic() - ctx._asked < job.lease.total_seconds() / 3:
        return None
    try:
        held = kit.store.renew(job.name, token=ctx.token, lease=job.lease)
    except StoreUnavailable as error:
        return _NotRun(Outcome.SKIPPED_STORE_ERROR, f"could not confirm the lock before the body: {error}")
    if held:
        return None
    ctx._mark_lost()
    return _NotRun(Outcome.SKIPPED_BUSY, "the lock was no longer this run's when its body was to start (its lease "
                                         "ran out while this process stalled, and another run took it)")


def _nothing() -> None:
    """A run with nothing to do once it is settled."""


def _where(started: RunRecord) -> str:
    """The run as the log names it: a scheduler's fire, or a worker's tick and task."""
    if started.task_id is None:
        return f"fire {started.fire_time.isoformat()}"
    return f"tick {started.fire_time.isoformat()}, task {started.task_id}"


def run_body(job: Job, ctx: JobContext, started: RunRecord, kit: BodyKit, settle: Settle, *,
             settled: Callable[[], None] = _nothing) -> RunRecord | None:
    """Run ``job``'s body under ``ctx`` and report it; ``started`` is its record while it runs (outcome None);
    ``settled()`` is called once, when the outcome is kept and counted and before it is reported (a scheduler's
    shutdown waits for it). None, with nothing run or settled, once ``kit.heartbeats`` is stopped (shutdown): the
    lock then expires with its lease. A BaseException the body raised is settled, then raised."""
    where = _where(started)
    beat = kit.heartbeats.add(job, ctx)
    if beat is None:
        settled()
        kit.log.warning("job %r (%s): shutdown finished before its body started; not run, its lock expires with "
                        "its lease", job.name, where)
        return None
    reports = kit.reports
    unheld = _unconfirmed(job, ctx, kit)
    if unheld is not None:  # not run: the lock may be another holder's by now, whose outcome is the tick's
        kit.heartbeats.remove(beat)
        settled()
        kit.log.warning("job %r (%s) not run: %s", job.name, where, unheld.error)
        skipped = dataclasses.replace(started, outcome=unheld.outcome, finished_at=datetime.now(UTC),
                                      error=unheld.error, lock_lost=ctx.lock_lost)
        reports.finished(skipped)
        return skipped
    if reports.listeners.wants("started"):
        reports.listeners.notify(started, "started")
    if job.ping_url is not None:  # <url>/start: the monitor measures the run's time and sees a hang
        kit.pings.ping(job.ping_url, "start")
    end = BodyEnd()
    try:
        with reports.telemetry.body(job, ctx):
            job.call(ctx)
    except Exception as raised:
        end.raised(raised)
    except BaseException as raised:  # SystemExit, KeyboardInterrupt: settled as failed (or timed out), raised
        end.raised(raised)
        raise
    finally:
        kit.heartbeats.remove(beat)
        outcome, error = end.verdict(job, beat, kit.log, where)
        try:
            if settle(outcome, error, beat) and outcome in COUNTED:
                count_failure(kit.store, job, error, instance_id=started.instance_id, notify=reports.listeners.notify)
        finally:
            settled()
    record = dataclasses.replace(started, outcome=outcome, finished_at=datetime.now(UTC), error=error,
                                 lock_lost=ctx.lock_lost)
    if outcome is Outcome.SUCCEEDED and kit.log.isEnabledFor(logging.INFO):
        kit.log.info("job %r (%s) succeeded in %.3fs", job.name, where,
                    (record.finished_at - record.started_at).total_seconds())  # type: ignore[operator]
    kit.pings.send(job.ping_url, record)  # after the release: a slow ping server never holds the lock
    if outcome is Outcome.SUCCEEDED:
        reports.succeeded(job.name)
    reports.finished(record)
    return record

"""How a run past its job's timeout is recorded, whatever the body does once told to stop."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Registry, Scheduler, mutex_cron
from mutexcron.cron import CronTrigger
from mutexcron.ops.alerts import job_problems
from mutexcron.records import JobContext, Outcome, RunRecord
from tests.support import wait_until

TICK = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)


def _run(body: object, **options: object) -> tuple[RunRecord, Scheduler]:
    registry = Registry()
    options = {"lease": 5, "timeout": 0.2, **options}
    mutex_cron("* * * * * *", name="limited", registry=registry, **options)(body)
    scheduler = Scheduler("memory://", registry=registry, instance_id="here")
    try:
        return scheduler.run_tick("limited", TICK), scheduler
    finally:
        scheduler.shutdown()


def test_a_body_that_returns_normally_after_the_signal_is_timed_out() -> None:
    record, _ = _run(lambda ctx: ctx.cancelled.wait(10))
    assert record.outcome is Outcome.TIMED_OUT


def test_a_body_that_raises_another_error_after_its_deadline_is_timed_out_with_that_error() -> None:
    def body(ctx: JobContext) -> None:
        ctx.cancelled.wait(10)
        raise RuntimeError("cleanup went wrong")

    record, _ = _run(body)
    assert record.outcome is Outcome.TIMED_OUT
    assert record.error is not None and "cleanup went wrong" in record.error


def test_a_body_that_ends_within_its_timeout_is_not_timed_out() -> None:
    record, _ = _run(lambda ctx: None)
    assert record.outcome is Outcome.SUCCEEDED


def test_a_timed_out_run_is_logged_as_an_error_naming_the_job(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="mutexcron.scheduler"):
        _run(lambda ctx: ctx.cancelled.wait(10))
    assert any(r.levelno == logging.ERROR and "'limited'" in r.getMessage() and "timed out" in r.getMessage()
               for r in caplog.records)


def test_a_timed_out_run_makes_its_job_failing() -> None:
    _, scheduler = _run(lambda ctx: ctx.cancelled.wait(10))
    state = scheduler.store.lock("limited")  # type: ignore[attr-defined]
    job = Registry()
    mutex_cron("* * * * * *", name="limited", registry=job)(lambda: None)
    problems = job_problems(job.get("limited"), state, CronTrigger(job.get("limited").spec, UTC),
                            now=datetime.now(UTC), misfire_grace_time=timedelta(seconds=1), known_since=TICK)
    assert [problem.kind for problem in problems] == ["failing"]
    assert "timeout" in problems[0].detail


def test_a_timed_out_run_is_counted_by_its_outcome_in_the_metrics() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client import REGISTRY

    def counted() -> float:
        return REGISTRY.get_sample_value("mutexcron_job_runs_total", {"job": "limited", "outcome": "timed_out"}) or 0.0

    before = counted()
    registry = Registry()
    mutex_cron("* * * * * *", name="limited", registry=registry, lease=5, timeout=0.2)(
        lambda ctx: ctx.cancelled.wait(10))
    scheduler = Scheduler("memory://", registry=registry, instance_id="here", metrics=True)
    try:
        assert scheduler.run_tick("limited", TICK).outcome is Outcome.TIMED_OUT
    finally:
        scheduler.shutdown()
    assert counted() == before + 1


IGNORES = "ignores ctx.cancelled"


def test_a_renewal_due_at_the_timeout_instant_is_made_without_calling_the_body_deaf(
        caplog: pytest.LogCaptureFixture) -> None:
    """lease=3 s, timeout=1 s: the first renewal (lease / 3) falls due at the very instant of the timeout. The body
    is told to stop then and has had no time to: the lock is renewed, and no "ignores ctx.cancelled" error."""
    with caplog.at_level(logging.WARNING, logger="mutexcron.scheduler"):
        record, _ = _run(lambda ctx: ctx.cancelled.wait(10), lease=3, timeout=1)
    assert record.outcome is Outcome.TIMED_OUT
    assert [r.getMessage() for r in caplog.records if IGNORES in r.getMessage()] == []


def test_a_body_still_running_at_the_renewal_after_its_timeout_is_logged_as_ignoring_the_signal(
        caplog: pytest.LogCaptureFixture) -> None:
    """The renewal at the timeout instant is made; the next one (a third of the lease later) finds the body still
    running, and is not: that body ignores ctx.cancelled."""
    logged = threading.Event()

    def deaf(ctx: JobContext) -> None:
        ctx.cancelled.wait(10)
        wait_until(lambda: any(IGNORES in r.getMessage() for r in caplog.records), timeout=10,
                   what="the error about a body that ignores ctx.cancelled")
        logged.set()

    with caplog.at_level(logging.WARNING, logger="mutexcron.scheduler"):
        record, _ = _run(deaf, lease=3, timeout=1)
    assert logged.is_set() and record.outcome is Outcome.TIMED_OUT
    (error,) = [r for r in caplog.records if IGNORES in r.getMessage()]
    assert error.levelno == logging.ERROR and "'limited'" in error.getMessage()

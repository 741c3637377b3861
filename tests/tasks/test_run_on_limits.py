"""A ``run_on="tasks"`` body gets its job's timeout in the worker: told to stop through ``ctx.cancelled``,
recorded ``timed_out`` (the task's result says so, so a retry does not run it again), its lock released with that
outcome; the stop request of a newer tick of an ``on_busy="replace"`` job, recorded ``replaced``; and a failed run
counted towards ``pause_on_failure``. Lock store and task queue on Redis."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from mutexcron import JobContext, Outcome, RunRecord
from mutexcron.ops.alerts import Alert
from mutexcron.ops.failures import PAUSED_BY
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import ControlStore, LockStore
from mutexcron.tasks import TaskQueue, TaskStatus
from mutexcron.tasks.job_runs import JobRunner
from tests.support import wait_until

JOB = "reports.limited"
TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


def test_a_worker_tells_a_body_past_its_timeout_to_stop_and_records_it_timed_out(
        registry: Registry, new_scheduler: Callable[..., Scheduler], redis_store: LockStore,
        worker_queue: TaskQueue) -> None:
    told = threading.Event()

    def body(ctx: JobContext) -> None:
        if ctx.cancelled.wait(30):
            told.set()
            ctx.check_cancelled()

    mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", lease=60, timeout=0.5)(body)
    runner = JobRunner(redis_store, lookup=registry.get, instance_id="worker-1")
    runner.register(worker_queue, visibility_timeout=timedelta(seconds=1))  # at most the job's lease
    runs: list[RunRecord] = []
    runner.add_listener(runs.append)
    try:
        enqueued = new_scheduler(redis_store, "web-1", tasks=worker_queue).run_tick(JOB, TICK)
        assert enqueued.outcome is Outcome.ENQUEUED
        worker_queue.start()
        wait_until(lambda: worker_queue.status(enqueued.task_id or "") == TaskStatus.SUCCEEDED, timeout=15,
                   what="the task to end")
    finally:
        runner.close()
    assert told.is_set()
    assert [run.outcome for run in runs] == [Outcome.TIMED_OUT]
    assert isinstance(redis_store, ControlStore)
    state = redis_store.lock(JOB)
    # Released (not left to its 60 s lease) with the outcome, which alerts read as a failure.
    assert state is not None and not state.is_held(redis_store.now()) and state.last_outcome == "timed_out"
    result = json.loads(worker_queue.backend.load_result(enqueued.task_id or "") or "{}")
    assert result["outcome"] == "timed_out"


def test_a_worker_tells_a_body_a_newer_tick_replaces_to_stop_and_runs_the_new_tick_after_it(
        registry: Registry, new_scheduler: Callable[..., Scheduler], redis_store: LockStore,
        worker_queue: TaskQueue) -> None:
    started = threading.Event()

    def body(ctx: JobContext) -> None:
        if ctx.fire_time == TICK:
            started.set()
            ctx.cancelled.wait(30)

    mutex_cron("0 * * * *", name=JOB, registry=registry, run_on="tasks", lease=1.5, on_busy="replace")(body)
    runner = JobRunner(redis_store, lookup=registry.get, instance_id="worker-1")
    runner.register(worker_queue, visibility_timeout=timedelta(seconds=1))  # at most the job's lease
    runs: list[RunRecord] = []
    runner.add_listener(runs.append)
    scheduler = new_scheduler(redis_store, "web-1", tasks=worker_queue)
    try:
        assert scheduler.run_tick(JOB, TICK).outcome is Outcome.ENQUEUED
        worker_queue.start()
        assert started.wait(10)  # the first tick's body runs on the worker, under the lock the scheduler took
        newer = scheduler.run_tick(JOB, TICK + timedelta(hours=1))  # waits until the replaced body released
        assert newer.outcome is Outcome.ENQUEUED
        wait_until(lambda: len(runs) == 2, timeout=15, what="both ticks to run on the worker")
    finally:
        runner.close()
    assert [(run.fire_time, run.outcome) for run in runs] == [
        (TICK, Outcome.REPLACED), (TICK + timedelta(hours=1), Outcome.SUCCEEDED)]


def test_a_worker_counts_a_failed_run_and_pauses_the_job_at_its_pause_on_failure(
        registry: Registry, new_scheduler: Callable[..., Scheduler], redis_store: LockStore,
        worker_queue: TaskQueue) -> None:
    def body() -> None:
        raise RuntimeError("the export bucket is gone")

    mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", lease=60, pause_on_failure=1)(body)
    runner = JobRunner(redis_store, lookup=registry.get, instance_id="worker-1")
    runner.register(worker_queue, visibility_timeout=timedelta(seconds=1))  # at most the job's lease
    alerts: list[Alert] = []
    runner.add_listener(alerts.append, events=["paused"])
    try:
        enqueued = new_scheduler(redis_store, "web-1", tasks=worker_queue).run_tick(JOB, TICK)
        worker_queue.start()
        wait_until(lambda: alerts, timeout=15, what="the paused alert from the worker")
    finally:
        runner.close()
    assert enqueued.outcome is Outcome.ENQUEUED
    assert isinstance(redis_store, ControlStore)
    state = redis_store.lock(JOB)
    assert state is not None and state.paused_by == PAUSED_BY and state.failures == 1
    assert [(alert.job_name, alert.event, alert.instance_id) for alert in alerts] == [(JOB, "paused", "worker-1")]

"""A ``run_on="tasks"`` body gets its job's timeout in the worker: told to stop through ``ctx.cancelled``,
recorded ``timed_out`` (the task's result says so, so a retry does not run it again), its lock released with that
outcome; the stop request of a newer tick of an ``on_busy="replace"`` job, recorded ``replaced``; and a failed run
counted towards ``pause_on_failure``. Lock store and task queue on Redis."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import JobContext, Outcome, RunRecord
from mutexcron.ops.alerts import Alert
from mutexcron.registry import Registry, mutex_cron
from mutexcron.running.failures import PAUSED_BY
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import ControlStore, LockStore
from mutexcron.tasks import RetryLater, TaskQueue, TaskStatus
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


def run_one_tick(registry: Registry, new_scheduler: Callable[..., Scheduler], store: LockStore,
                 queue: TaskQueue) -> tuple[str, list[RunRecord]]:
    """The tick enqueued by a scheduler, then run by a worker's JobRunner in this thread: its task id and the
    worker's records (a BaseException the body raised propagates)."""
    runner = JobRunner(store, lookup=registry.get, instance_id="worker-1")
    runner.register(queue, visibility_timeout=timedelta(seconds=1))  # at most the job's lease
    runs: list[RunRecord] = []
    runner.add_listener(runs.append)
    enqueued = new_scheduler(store, "web-1", tasks=queue).run_tick(JOB, TICK)
    assert enqueued.outcome is Outcome.ENQUEUED and enqueued.task_id is not None
    info = queue.info(enqueued.task_id)
    assert info is not None
    try:
        runner.run(info.payload)
    finally:
        runner.close()
    return enqueued.task_id, runs


def test_a_worker_that_lost_the_run_while_its_body_failed_counts_no_failure(
        registry: Registry, new_scheduler: Callable[..., Scheduler], redis_store: LockStore,
        worker_queue: TaskQueue) -> None:
    """Its outcome is not the tick's (another holder's is), so it must not pause the job."""
    assert isinstance(redis_store, ControlStore)

    def body() -> None:
        assert redis_store.force_unlock(JOB)  # the run taken from this worker while its body runs
        raise RuntimeError("the export bucket is gone")

    mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", lease=60, pause_on_failure=1)(body)
    _, runs = run_one_tick(registry, new_scheduler, redis_store, worker_queue)

    assert [(run.outcome, run.lock_lost) for run in runs] == [(Outcome.FAILED, True)]
    state = redis_store.lock(JOB)
    assert state is not None and not state.paused and state.failures == 0


def test_a_worker_body_interrupted_keeps_a_failed_result_and_releases_its_lock(
        registry: Registry, new_scheduler: Callable[..., Scheduler], redis_store: LockStore,
        worker_queue: TaskQueue) -> None:
    """A KeyboardInterrupt or SystemExit ends the worker, not the tick's bookkeeping: the task delivered again only
    releases, and the lock is not left to its lease."""
    assert isinstance(redis_store, ControlStore)

    def body() -> None:
        raise KeyboardInterrupt

    mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", lease=60)(body)
    with pytest.raises(KeyboardInterrupt):
        run_one_tick(registry, new_scheduler, redis_store, worker_queue)

    state = redis_store.lock(JOB)
    assert state is not None and not state.is_held(redis_store.now()) and state.last_outcome == "failed"


def test_a_closed_worker_runs_no_body_and_asks_for_the_task_again_after_the_lease(
        registry: Registry, new_scheduler: Callable[..., Scheduler], redis_store: LockStore,
        worker_queue: TaskQueue) -> None:
    ran: list[JobContext] = []
    mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", lease=60)(ran.append)
    runner = JobRunner(redis_store, lookup=registry.get, instance_id="worker-1")
    runner.register(worker_queue, visibility_timeout=timedelta(seconds=1))
    enqueued = new_scheduler(redis_store, "web-1", tasks=worker_queue).run_tick(JOB, TICK)
    info = worker_queue.info(enqueued.task_id or "")
    assert info is not None
    runner.close()

    with pytest.raises(RetryLater, match="closing") as retry:
        runner.run(info.payload)

    assert ran == [] and retry.value.delay == timedelta(seconds=60)

"""A ``run_on="tasks"`` body gets its job's timeout in the worker: told to stop through ``ctx.cancelled``,
recorded ``timed_out`` (the task's result says so, so a retry does not run it again), its lock released with that
outcome. Lock store and task queue on Redis."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from mutexcron import JobContext, Outcome, RunRecord
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import ControlStore, LockStore, store_from_url
from mutexcron.tasks import HandlerRegistry, TaskQueue, TaskStatus
from mutexcron.tasks.job_runs import JobRunner
from tests.support import wait_until

JOB = "reports.limited"
TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


@pytest.fixture
def store(redis_url: str) -> Iterator[LockStore]:
    store = store_from_url(redis_url)
    yield store
    store.close()


@pytest.fixture
def queue(redis_tasks_url: str) -> Iterator[TaskQueue]:
    queue = TaskQueue(redis_tasks_url, handlers=HandlerRegistry(), worker_id="worker-1")
    yield queue
    queue.close()


def test_a_worker_tells_a_body_past_its_timeout_to_stop_and_records_it_timed_out(
        registry: Registry, new_scheduler: Callable[..., Scheduler], store: LockStore, queue: TaskQueue) -> None:
    told = threading.Event()

    def body(ctx: JobContext) -> None:
        if ctx.cancelled.wait(30):
            told.set()
            ctx.check_cancelled()

    mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", lease=60, timeout=0.5)(body)
    runner = JobRunner(store, lookup=registry.get, instance_id="worker-1")
    runner.register(queue)
    runs: list[RunRecord] = []
    runner.add_listener(runs.append)
    try:
        enqueued = new_scheduler(store, "web-1", tasks=queue).run_tick(JOB, TICK)
        assert enqueued.outcome is Outcome.ENQUEUED
        queue.start()
        wait_until(lambda: queue.status(enqueued.task_id or "") == TaskStatus.SUCCEEDED, timeout=15,
                   what="the task to end")
    finally:
        runner.close()
    assert told.is_set()
    assert [run.outcome for run in runs] == [Outcome.TIMED_OUT]
    assert isinstance(store, ControlStore)
    state = store.lock(JOB)
    # Released (not left to its 60 s lease) with the outcome, which alerts read as a failure.
    assert state is not None and not state.is_held(store.now()) and state.last_outcome == "timed_out"
    result = json.loads(queue.backend.load_result(enqueued.task_id or "") or "{}")
    assert result["outcome"] == "timed_out"

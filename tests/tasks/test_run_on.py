"""``mutex_cron(..., run_on="tasks")`` in one process: the lock winner enqueues one task per tick on the scheduler's
TaskQueue (Redis here; every backend proves the idempotent enqueue in tests/tasks/task_id_contract.py) and keeps
the lock; a :class:`JobRunner` on a worker runs the body with the tick's context under that lock. Several OS
processes, and a worker killed mid-body: tests/tasks/test_run_on_fleet.py."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest

from mutexcron import JobContext, Outcome, RunRecord
from mutexcron.errors import JobDefinitionError, SchedulerConfigError, StoreUnavailable
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import MemoryLockStore
from mutexcron.tasks import HandlerRegistry, RetryLater, TaskQueue, TaskStatus
from mutexcron.tasks.job_runs import TASK_TYPE, JobRunner, JobTask, declared_or_stored, tick_task_id
from tests.support import wait_until
from tests.support.tcp_proxy import TcpProxy

JOB = "reports.nightly"
TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
VISIBILITY = timedelta(seconds=30)  # the worker's visibility timeout: at most the job's lease (60 s)


class Body:
    """The job's body: records each context it ran with; ``fail`` makes it raise."""

    def __init__(self) -> None:
        self.contexts: list[JobContext] = []
        self.fail = False
        self.ran = threading.Event()

    def __call__(self, ctx: JobContext) -> None:
        self.contexts.append(ctx)
        self.ran.set()
        if self.fail:
            raise RuntimeError("the report server is down")


@pytest.fixture
def body(registry: Registry) -> Body:
    body = Body()
    mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", lease=60)(body)
    return body


@pytest.fixture
def store() -> MemoryLockStore:
    return MemoryLockStore()


@pytest.fixture
def queue(redis_tasks_url: str) -> Iterator[TaskQueue]:
    """The task queue of the schedulers and of the worker (a handler registry of this test's own)."""
    queue = TaskQueue(redis_tasks_url, handlers=HandlerRegistry(), worker_id="worker-1")
    yield queue
    queue.close()


@pytest.fixture
def scheduler(new_scheduler: Callable[..., Scheduler], store: MemoryLockStore, queue: TaskQueue) -> Scheduler:
    return new_scheduler(store, "web-1", tasks=queue)


@pytest.fixture
def runner(store: MemoryLockStore, registry: Registry, queue: TaskQueue) -> Iterator[JobRunner]:
    runner = JobRunner(store, lookup=registry.get, instance_id="worker-1")
    runner.register(queue, visibility_timeout=VISIBILITY)
    yield runner
    runner.close()


def runs_of(runner: JobRunner) -> list[RunRecord]:
    records: list[RunRecord] = []
    runner.add_listener(records.append)
    return records


def payload_of(queue: TaskQueue, task_id: str) -> Any:
    info = queue.info(task_id)
    assert info is not None, f"no task {task_id}"
    return info.payload


# -- declaring ---------------------------------------------------------------------------------------


def test_run_on_other_than_here_or_tasks_is_a_job_definition_error_naming_job_and_value(registry: Registry) -> None:
    with pytest.raises(JobDefinitionError, match=r"job 'x': run_on must be one of \('here', 'tasks'\), not 'celery'"):
        mutex_cron("* * * * *", name="x", registry=registry, run_on="celery")(lambda: None)  # type: ignore[arg-type]
    assert "x" not in registry


def test_run_on_defaults_to_here(registry: Registry) -> None:
    mutex_cron("* * * * *", name="x", registry=registry)(lambda: None)
    assert registry.get("x").run_on == "here"


@pytest.mark.parametrize("tasks", [42, "not a url"])
def test_a_bad_tasks_option_is_a_scheduler_config_error(registry: Registry, tasks: object) -> None:
    with pytest.raises(SchedulerConfigError, match="Scheduler tasks must be"):
        Scheduler(MemoryLockStore(), registry=registry, tasks=tasks)  # type: ignore[arg-type]


def test_start_without_tasks_names_the_jobs_that_run_on_tasks(new_scheduler: Callable[..., Scheduler],
                                                              body: Body) -> None:
    scheduler = new_scheduler(MemoryLockStore())
    with pytest.raises(SchedulerConfigError, match=rf"'{JOB}' run on tasks .* has no task queue"):
        scheduler.start()
    assert not scheduler.running


# -- the scheduler's side ------------------------------------------------------------------------------


def test_the_winner_enqueues_the_tick_keeps_the_lock_and_does_not_run_the_body(
        scheduler: Scheduler, body: Body, queue: TaskQueue, store: MemoryLockStore) -> None:
    record = scheduler.run_tick(JOB, TICK)
    assert (record.outcome, record.task_id, record.token) == (Outcome.ENQUEUED, tick_task_id(JOB, TICK), 1)
    assert body.contexts == []
    state = store.lock(JOB)
    assert state is not None and state.locked and state.token == 1 and state.last_outcome is None
    task = JobTask.from_payload(payload_of(queue, tick_task_id(JOB, TICK)))
    assert (task.job_name, task.fire_time, task.token, task.catch_up, task.enqueued_by) == (JOB, TICK, 1, False,
                                                                                           "web-1")
    assert queue.info(record.task_id or "") is not None and queue.status(record.task_id or "") == TaskStatus.SCHEDULED


def test_the_task_id_comes_from_the_job_and_the_fire_time() -> None:
    assert tick_task_id(JOB, TICK) == tick_task_id(JOB, TICK.astimezone(tz=None))
    assert len({tick_task_id(JOB, TICK), tick_task_id(JOB, TICK + timedelta(seconds=1)), tick_task_id("other", TICK),
                tick_task_id(JOB, TICK, manual=True)}) == 4


def test_another_instance_firing_the_same_tick_enqueues_nothing(
        new_scheduler: Callable[..., Scheduler], scheduler: Scheduler, body: Body, store: MemoryLockStore,
        queue: TaskQueue) -> None:
    scheduler.run_tick(JOB, TICK)
    other = new_scheduler(store, "web-2", tasks=queue)
    assert other.run_tick(JOB, TICK).outcome is Outcome.SKIPPED_ALREADY_RAN
    assert queue.backend.pending_counts() == {TASK_TYPE: 1}


def test_an_enqueue_that_fails_releases_the_lock_as_failed(
        new_scheduler: Callable[..., Scheduler], body: Body, store: MemoryLockStore) -> None:
    scheduler = new_scheduler(store, "web-1", tasks="redis://127.0.0.1:1/0")
    record = scheduler.run_tick(JOB, TICK)
    assert record.outcome is Outcome.FAILED and "StoreUnavailable" in (record.error or "")
    assert record.task_id == tick_task_id(JOB, TICK)
    state = store.lock(JOB)
    assert state is not None and not state.locked and state.last_outcome == "failed"
    assert "StoreUnavailable" in (state.last_error or "")


def test_a_manual_run_is_enqueued_too(scheduler: Scheduler, body: Body, queue: TaskQueue) -> None:
    record = scheduler.run_now(JOB)
    assert record.outcome is Outcome.ENQUEUED and record.manual
    assert (record.task_id or "").endswith("-m")
    assert JobTask.from_payload(payload_of(queue, record.task_id or "")).manual


# -- the worker's side -----------------------------------------------------------------------------------


def test_a_worker_runs_the_body_with_the_ticks_context_and_releases_the_lock_with_its_outcome(
        scheduler: Scheduler, body: Body, queue: TaskQueue, runner: JobRunner, store: MemoryLockStore) -> None:
    runs = runs_of(runner)
    enqueued = scheduler.run_tick(JOB, TICK)
    queue.start()
    wait_until(lambda: queue.status(enqueued.task_id or "") == TaskStatus.SUCCEEDED, what="the task to succeed")
    (ctx,) = body.contexts  # the worker's own token: the scheduler's acquire had 1
    assert (ctx.job_name, ctx.fire_time, ctx.token, ctx.catch_up, ctx.instance_id) == (JOB, TICK, 2, False,
                                                                                      "worker-1")
    state = store.lock(JOB)
    assert state is not None and not state.locked and state.last_outcome == "succeeded"
    assert state.last_success_at is not None
    (run,) = runs
    assert (run.outcome, run.task_id, run.token, run.fire_time, run.instance_id) == (
        Outcome.SUCCEEDED, enqueued.task_id, 2, TICK, "worker-1")


def test_a_failing_body_releases_the_lock_as_failed_with_its_error_and_is_not_retried(
        scheduler: Scheduler, body: Body, queue: TaskQueue, runner: JobRunner, store: MemoryLockStore) -> None:
    body.fail = True
    runs = runs_of(runner)
    enqueued = scheduler.run_tick(JOB, TICK)
    queue.start()
    wait_until(lambda: queue.status(enqueued.task_id or "") == TaskStatus.SUCCEEDED, what="the task to end")
    state = store.lock(JOB)
    assert state is not None and state.last_outcome == "failed" and "report server is down" in (state.last_error or "")
    assert [run.outcome for run in runs] == [Outcome.FAILED] and len(body.contexts) == 1
    result = json.loads(queue.backend.load_result(enqueued.task_id or "") or "{}")
    assert result["outcome"] == "failed" and "report server is down" in result["error"]


def test_a_task_whose_lock_was_force_unlocked_does_not_run_the_body_and_says_why(
        scheduler: Scheduler, body: Body, queue: TaskQueue, runner: JobRunner, store: MemoryLockStore,
        caplog: pytest.LogCaptureFixture) -> None:
    runs = runs_of(runner)
    enqueued = scheduler.run_tick(JOB, TICK)
    assert store.force_unlock(JOB)
    with caplog.at_level(logging.ERROR, "mutexcron.tasks.jobs"):
        runner.run(payload_of(queue, enqueued.task_id or ""))
    assert body.contexts == []
    (run,) = runs
    assert run.outcome is Outcome.SKIPPED_BUSY
    assert "the lock is no longer the tick's" in (run.error or "")
    assert f"job {JOB!r} (tick 2026-03-01T02:00:00+00:00" in caplog.text
    assert json.loads(queue.backend.load_result(enqueued.task_id or "") or "{}")["outcome"] == "not_run"


def test_a_task_delivered_again_after_its_body_finished_does_not_run_it_again(
        scheduler: Scheduler, body: Body, queue: TaskQueue, runner: JobRunner) -> None:
    enqueued = scheduler.run_tick(JOB, TICK)
    payload = payload_of(queue, enqueued.task_id or "")
    runner.run(payload)
    runner.run(payload)  # the worker died after the body, before the ack: the task comes back
    assert len(body.contexts) == 1


def test_a_task_delivered_again_while_the_dead_workers_lease_is_live_is_retried_once_it_ran_out(
        scheduler: Scheduler, body: Body, queue: TaskQueue, runner: JobRunner, store: MemoryLockStore) -> None:
    """What a worker killed (or stopped) mid-body leaves: the run taken over under its token, and no result. The
    task delivered again waits for that worker's lease, then runs the body with the same tick and a newer token."""
    enqueued = scheduler.run_tick(JOB, TICK)
    payload = payload_of(queue, enqueued.task_id or "")
    first = store.take_over(JOB, tick_token=1, owner="worker-0", lease=timedelta(milliseconds=300))
    assert first.token == 2  # the first attempt's, then it died
    with pytest.raises(RetryLater) as later:
        runner.run(payload)
    assert later.value.delay <= timedelta(milliseconds=300) and "worker-0" in str(later.value)
    assert body.contexts == []
    wait_until(lambda: not store.lock(JOB).is_held(store.now()), what="the dead worker's lease to run out")  # type: ignore[union-attr]
    runner.run(payload)
    assert [(ctx.fire_time, ctx.token) for ctx in body.contexts] == [(TICK, 3)]
    assert not store.renew(JOB, token=2, lease=timedelta(seconds=60))


def test_a_job_the_worker_does_not_know_is_not_run_and_its_lock_is_released_as_failed(
        scheduler: Scheduler, body: Body, queue: TaskQueue, store: MemoryLockStore) -> None:
    enqueued = scheduler.run_tick(JOB, TICK)
    runner = JobRunner(store, lookup=Registry().get, instance_id="worker-2")
    runner.register(queue, visibility_timeout=VISIBILITY)
    try:
        runner.run(payload_of(queue, enqueued.task_id or ""))
    finally:
        runner.close()
    state = store.lock(JOB)
    assert state is not None and not state.locked and state.last_outcome == "failed"
    assert "is not declared in worker worker-2" in (state.last_error or "")


def test_a_catch_up_tick_keeps_its_flag_on_the_worker(queue: TaskQueue, body: Body, runner: JobRunner,
                                                      store: MemoryLockStore) -> None:
    acquired = store.acquire(JOB, owner="web-1", lease=timedelta(seconds=60), fire_time=TICK)
    assert acquired.token is not None
    task = JobTask(tick_task_id(JOB, TICK), JOB, TICK, acquired.token, catch_up=True, enqueued_by="web-1")
    runner.run(json.loads(json.dumps(task.payload())))
    assert [ctx.catch_up for ctx in body.contexts] == [True]


def test_register_refuses_a_declared_job_whose_lease_is_shorter_than_the_visibility_timeout(
        body: Body, queue: TaskQueue, store: MemoryLockStore, registry: Registry) -> None:
    runner = JobRunner(store, registry=registry)
    try:
        with pytest.raises(SchedulerConfigError, match=rf"job\(s\) {JOB!r} \(lease 0:01:00\) run on tasks with a lease "
                                                       r"shorter than the workers' visibility timeout \(0:02:00\)"):
            runner.register(queue, visibility_timeout=timedelta(minutes=2))  # the job's lease is 60 s
    finally:
        runner.close()
    assert "mutexcron-job" not in queue.handlers


def test_a_job_found_at_run_time_with_a_lease_shorter_than_the_visibility_timeout_is_not_run_and_released(
        scheduler: Scheduler, body: Body, queue: TaskQueue, store: MemoryLockStore, registry: Registry,
        caplog: pytest.LogCaptureFixture) -> None:
    runner = JobRunner(store, lookup=registry.get)  # no declared jobs to check at register: a run-time lookup
    runner.register(queue, visibility_timeout=timedelta(minutes=2))
    runs = runs_of(runner)
    try:
        with caplog.at_level(logging.ERROR, "mutexcron.tasks.jobs"):
            enqueued = scheduler.run_tick(JOB, TICK)
            runner.run(payload_of(queue, enqueued.task_id or ""))
    finally:
        runner.close()
    assert body.contexts == []
    assert [run.outcome for run in runs] == [Outcome.FAILED]
    assert f"job {JOB!r}: its lease (0:01:00) is shorter than the workers' visibility timeout" in caplog.text
    state = store.lock(JOB)
    assert state is not None and not state.locked and state.last_outcome == "failed"


def test_a_run_time_schedule_that_runs_on_tasks_is_enqueued_and_found_by_the_workers_lookup(
        scheduler: Scheduler, queue: TaskQueue, store: MemoryLockStore, registry: Registry) -> None:
    calls: list[dict[str, Any]] = []
    registry.allow(lambda **kwargs: calls.append(kwargs), "reports.export")
    scheduler.add_schedule("export.nightly", "0 3 * * *", "reports.export", kwargs={"fmt": "csv"}, run_on="tasks")
    enqueued = scheduler.run_tick("export.nightly", TICK + timedelta(hours=1))
    assert enqueued.outcome is Outcome.ENQUEUED and calls == []
    runner = JobRunner(store, lookup=declared_or_stored(registry, store), instance_id="worker-1")
    runner.register(queue, visibility_timeout=VISIBILITY)
    try:
        runner.run(payload_of(queue, enqueued.task_id or ""))
    finally:
        runner.close()
    assert calls == [{"fmt": "csv"}]
    state = store.lock("export.nightly")
    assert state is not None and not state.locked and state.last_outcome == "succeeded"


def test_a_store_outage_while_the_worker_looks_the_job_up_is_tried_again_not_a_failure(
        scheduler: Scheduler, body: Body, queue: TaskQueue, store: MemoryLockStore) -> None:
    enqueued = scheduler.run_tick(JOB, TICK)

    def unreachable(name: str) -> Any:
        raise StoreUnavailable("the lock store is down")

    runner = JobRunner(store, lookup=unreachable)
    runner.register(queue, visibility_timeout=VISIBILITY)
    try:
        with pytest.raises(StoreUnavailable):
            runner.run(payload_of(queue, enqueued.task_id or ""))
    finally:
        runner.close()
    state = store.lock(JOB)
    assert state is not None and state.locked and state.last_outcome is None  # still the tick's, for the retry


def test_a_later_tick_that_finds_the_lock_busy_names_the_worker_running_the_body(
        scheduler: Scheduler, body: Body, queue: TaskQueue, store: MemoryLockStore) -> None:
    enqueued = scheduler.run_tick(JOB, TICK)
    assert enqueued.token is not None
    assert store.take_over(JOB, tick_token=enqueued.token, owner="worker-7", lease=timedelta(seconds=60)).acquired
    busy = scheduler.run_tick(JOB, TICK + timedelta(days=1))
    assert busy.outcome is Outcome.SKIPPED_BUSY and busy.error == "lock held by worker-7"


def test_a_body_that_ends_while_the_store_is_unreachable_keeps_its_outcome_once_it_is_back_and_runs_once(
        redis_url: str, registry: Registry) -> None:
    """A worker's body ends while its store (the lock store and the task backend, one Redis) cannot be reached: the
    worker keeps trying to store the outcome while its lease on the run lasts (no other worker can take the tick
    over meanwhile), so the task delivered again only releases. Found by the nemesis run (a store restarted as a
    body ended ran the tick a second time)."""
    server = urlsplit(redis_url)
    with TcpProxy(server.hostname or "127.0.0.1", server.port or 6379) as proxy:
        url = redis_url.replace(server.netloc, f"127.0.0.1:{proxy.port}")
        ran: list[int] = []

        def body(ctx: JobContext) -> None:
            ran.append(ctx.token)
            proxy.cut()  # the store goes away as the body ends; it is back a second later, within the 5 s lease
            threading.Timer(1.0, proxy.restore).start()

        mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", lease=5)(body)
        queue = TaskQueue(url, handlers=HandlerRegistry(), worker_id="worker-1")
        runner = JobRunner(url, registry=registry, instance_id="worker-1")
        runner.register(queue, visibility_timeout=timedelta(seconds=5))
        scheduler = Scheduler(url, registry=registry, instance_id="web-1", tasks=queue)
        try:
            enqueued = scheduler.run_tick(JOB, TICK)
            payload = payload_of(queue, enqueued.task_id or "")
            runner.run(payload)
            runner.run(payload)  # the task delivered again: its ack was lost with the link
            assert ran == [2]
            assert json.loads(queue.backend.load_result(enqueued.task_id or "") or "{}")["outcome"] == "succeeded"
            state = scheduler.store.lock(JOB)  # type: ignore[attr-defined]
            assert state is not None and not state.locked and state.last_outcome == "succeeded"
        finally:
            scheduler.shutdown()
            runner.close()
            queue.close()

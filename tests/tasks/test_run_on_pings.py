"""A ``run_on="tasks"`` job with a ``ping_url`` is pinged from where its body runs: ``/start`` by the worker as the
body starts, then the run's own ping; the instance that enqueued it sends nothing. Lock store and queue on Redis."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from mutexcron import Outcome
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import LockStore
from mutexcron.tasks import TaskQueue, TaskStatus
from mutexcron.tasks.job_runs import JobRunner
from tests.support import wait_until
from tests.support.ping_servers import PingServer

JOB = "reports.pinged"
TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


@pytest.fixture
def server() -> Iterator[PingServer]:
    ping_server = PingServer()
    yield ping_server
    ping_server.close()


def test_the_worker_sends_start_as_the_body_starts_then_the_runs_ping(
        registry: Registry, new_scheduler: Callable[..., Scheduler], redis_store: LockStore, worker_queue: TaskQueue,
        server: PingServer) -> None:
    seen_at_start: list[list[str]] = []
    release = threading.Event()

    def body() -> None:
        wait_until(lambda: server.paths, timeout=5, what="the start ping while the body runs")
        seen_at_start.append(list(server.paths))
        release.set()

    mutex_cron("0 2 * * *", name=JOB, registry=registry, run_on="tasks", ping_url=server.url)(body)
    runner = JobRunner(redis_store, lookup=registry.get, instance_id="worker-1")
    runner.register(worker_queue)
    try:
        enqueued = new_scheduler(redis_store, "web-1", tasks=worker_queue).run_tick(JOB, TICK)
        assert enqueued.outcome is Outcome.ENQUEUED
        assert server.paths == []  # enqueuing is not a start
        worker_queue.start()
        wait_until(lambda: worker_queue.status(enqueued.task_id or "") == TaskStatus.SUCCEEDED, timeout=15,
                   what="the task to end")
        wait_until(lambda: len(server.paths) == 2, timeout=5, what="the run's ping after its start")
    finally:
        runner.close()
    assert release.is_set() and seen_at_start == [["/ping/3f1c/start"]]
    assert server.paths == ["/ping/3f1c/start", "/ping/3f1c"]

"""``django.tasks`` (Django 6+) on mutexcron: ``mutexcron_django.tasks.MutexcronTaskBackend`` end to end.

Enqueue, ``.using(run_after=…)``, a worker running the tasks (a thread of this process on Redis and on the
``django://`` backend, and a ``manage.py mutexcron worker`` process), results with return values and
errors, and cancelling by result id.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import django
import pytest

pytest.importorskip("django.tasks", reason=f"django.tasks exists only in Django 6.0+ (this is Django "
                                           f"{django.get_version()})")

import redis
from django.core.exceptions import ImproperlyConfigured
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings

import mutexcron_django.tasks as mutexcron_tasks
from mutexcron.tasks import Handler, HandlerRegistry, TaskQueue, TaskStatus
from mutexcron_django.tasks import (
    TASK_TYPE,
    MutexcronTaskBackend,
    TaskCancelled,
    get_task_queue,
    reset_task_queue,
)
from tests.django.jobhelpers import wait_for
from tests.django.taskapps import djtasks
from tests.django.test_tasks_integration import WorkerProcess
from tests.support import span_exporter, unique_name

BACKEND = "mutexcron_django.tasks.MutexcronTaskBackend"
DJANGO_TASKS = {
    "default": {"BACKEND": BACKEND},
    "mail": {"BACKEND": BACKEND, "QUEUES": ["default", "emails"]},
    "dummy": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"},
}


@pytest.fixture(params=["redis", pytest.param("django", marks=pytest.mark.django_db(transaction=True))])
def queue_url(request: pytest.FixtureRequest) -> str:
    """The mutexcron backend under django.tasks: Redis (a key prefix of this test's own), or the database
    (committed rows: the worker thread has a connection of its own)."""
    if request.param == "redis":
        return request.getfixturevalue("redis_url")
    return "django://"


@pytest.fixture
def redis_only(redis_url: str) -> str:
    return redis_url


def _configured(url: str) -> Iterator[None]:
    djtasks.calls.clear()
    reset_task_queue()
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": url}}, TASKS=DJANGO_TASKS):
        yield
    reset_task_queue()  # stops a worker thread the test started


@pytest.fixture
def configured(queue_url: str) -> Iterator[None]:
    """MUTEXCRON["TASKS"] on ``queue_url`` and Django's TASKS on MutexcronTaskBackend."""
    yield from _configured(queue_url)


@pytest.fixture
def on_redis(redis_url: str) -> Iterator[None]:
    """As ``configured``, on Redis only (for what does not depend on the backend)."""
    yield from _configured(redis_url)


@pytest.fixture
def worker(configured: None) -> TaskQueue:
    """A worker thread of this process's queue, running django.tasks tasks."""
    queue = get_task_queue()
    queue.start([TASK_TYPE])
    return queue


@pytest.fixture
def redis_worker(on_redis: None) -> TaskQueue:
    queue = get_task_queue()
    queue.start([TASK_TYPE])
    return queue


def finished(result: Any, timeout: float = 15.0) -> Any:
    """The result, refreshed until it is SUCCESSFUL or FAILED."""

    def done() -> bool:
        result.refresh()
        return result.is_finished

    wait_for(done, timeout=timeout, what=f"task {result.id} to finish")
    return result


# -- the backend -------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("on_redis")
def test_the_backend_supports_defer_and_get_result_but_not_priorities() -> None:
    backend = task_backends["default"]

    assert isinstance(backend, MutexcronTaskBackend)
    assert backend.supports_defer and backend.supports_get_result and backend.supports_async_task
    assert not backend.supports_priority
    with pytest.raises(InvalidTask, match="priority"):
        djtasks.add.using(priority=10)


def test_the_backend_takes_no_options() -> None:
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "OPTIONS": {"URL": "redis://"}}}), \
            pytest.raises(ImproperlyConfigured, match=r"TASKS\['default'\]\['OPTIONS'\].*MUTEXCRON\['TASKS'\]"):
        task_backends["default"]


@pytest.mark.usefixtures("configured")
def test_enqueue_schedules_one_mutexcron_task_holding_the_call() -> None:
    sent: list[Any] = []

    def receiver(sender: Any, task_result: Any, **_: Any) -> None:
        sent.append(task_result)

    task_enqueued.connect(receiver)
    try:
        before = datetime.now(UTC)
        result = djtasks.add.enqueue(2, 3, label="five")
    finally:
        task_enqueued.disconnect(receiver)

    assert result.status == TaskResultStatus.READY and result.backend == "default"
    assert (result.args, result.kwargs) == ([2, 3], {"label": "five"})
    assert result.enqueued_at is not None and result.enqueued_at >= before
    assert [sent_result.id for sent_result in sent] == [result.id]
    info = get_task_queue().info(result.id)  # the result id is the mutexcron task's id
    assert info is not None and info.task_type == TASK_TYPE == "django.tasks"
    assert info.status == TaskStatus.SCHEDULED
    assert info.payload == {
        "v": 1, "id": result.id, "task": "tests.django.taskapps.djtasks.add", "args": [2, 3],
        "kwargs": {"label": "five"}, "backend": "default", "queue_name": "default", "priority": 0,
        "run_after": None, "enqueued_at": info.payload["enqueued_at"],
    }
    assert abs(info.run_at - before) < timedelta(seconds=5)
    again = djtasks.add.get_result(result.id)
    assert (again.status, again.args, again.kwargs, again.enqueued_at) == (
        TaskResultStatus.READY, [2, 3], {"label": "five"}, result.enqueued_at)
    with pytest.raises(ValueError, match="not finished yet"):
        again.return_value  # noqa: B018


@pytest.mark.usefixtures("on_redis")
def test_arguments_that_are_not_json_are_refused_before_anything_is_scheduled(redis_prefix: str) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        djtasks.add.enqueue(object(), 1)

    client = redis.Redis.from_url("redis://127.0.0.1:6379/9")
    try:
        assert list(client.scan_iter(match=f"{redis_prefix}*task:*")) == []
    finally:
        client.close()


@pytest.mark.usefixtures("on_redis")
def test_queue_names_are_checked_against_the_aliases_queues_and_recorded() -> None:
    with pytest.raises(InvalidTask, match="Queue 'emails' is not valid"):
        djtasks.add.using(queue_name="emails")

    result = djtasks.add.using(queue_name="emails", backend="mail").enqueue(1, 1)

    info = get_task_queue().info(result.id)
    assert info is not None and (info.payload["queue_name"], info.payload["backend"]) == ("emails", "mail")
    found = task_backends["default"].get_result(result.id)  # one queue: any alias of it finds the result
    assert (found.backend, found.task.queue_name, found.task.backend) == ("mail", "emails", "mail")


# -- a worker runs them ----------------------------------------------------------------------------------


def test_a_worker_runs_the_task_and_get_result_is_successful_with_the_return_value(worker: TaskQueue) -> None:
    result = djtasks.add.enqueue(2, 3, label="five")

    finished(result)

    assert djtasks.calls == [("add", (2, 3, "five"))]
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert worker.status(result.id) == TaskStatus.SUCCEEDED
    fetched = djtasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.errors == []
    assert fetched.return_value == {"label": "five", "total": 5, "pair": [2, 3]}
    assert result.return_value == fetched.return_value
    assert fetched.worker_ids == [worker.worker_id] and fetched.attempts == 1
    assert fetched.enqueued_at <= fetched.started_at <= fetched.finished_at
    assert fetched.last_attempted_at == fetched.started_at


def test_run_after_defers_the_task_until_then(worker: TaskQueue) -> None:
    run_after = datetime.now(UTC) + timedelta(seconds=1.5)
    result = djtasks.add.using(run_after=run_after).enqueue(1, 1)

    info = worker.info(result.id)
    assert info is not None and abs(info.run_at - run_after) < timedelta(milliseconds=2)
    assert info.payload["run_after"] is not None
    time.sleep(0.7)
    assert djtasks.add.get_result(result.id).status == TaskResultStatus.READY and djtasks.calls == []

    finished(result)

    assert result.status == TaskResultStatus.SUCCESSFUL and djtasks.calls == [("add", (1, 1, "sum"))]
    assert result.task.run_after == run_after  # the result's task carries the deferral
    assert result.started_at >= run_after - timedelta(milliseconds=50)


def test_a_task_cancelled_before_it_runs_never_runs(worker: TaskQueue) -> None:
    result = djtasks.add.using(run_after=datetime.now(UTC) + timedelta(seconds=1)).enqueue(4, 4)

    assert mutexcron_tasks.cancel(result) is True
    assert task_backends["default"].cancel(result.id) is False  # already cancelled
    time.sleep(1.8)

    assert djtasks.calls == []
    assert worker.status(result.id) == TaskStatus.CANCELLED
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    (error,) = result.errors
    assert error.exception_class is TaskCancelled
    assert f"task {result.id} was cancelled before it ran" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_with_tracing_and_metrics_a_task_enqueued_in_a_span_runs_in_its_child_span_and_is_counted(
    queue_url: str,
) -> None:
    """MUTEXCRON["TRACING"] and ["METRICS"] reach the queue that build_queue() makes; enqueue() carries the trace."""
    from opentelemetry import trace
    from prometheus_client import REGISTRY

    exporter = span_exporter()
    counted = {"task_type": TASK_TYPE, "outcome": "succeeded"}
    setting = {"AUTOSTART": False, "TASKS": {"BACKEND": queue_url}, "TRACING": True, "METRICS": True}
    reset_task_queue()
    with override_settings(MUTEXCRON=setting, TASKS=DJANGO_TASKS):
        try:
            get_task_queue().start([TASK_TYPE])
            before = REGISTRY.get_sample_value("mutexcron_tasks_total", counted) or 0.0
            with trace.get_tracer("tests").start_as_current_span(unique_name("request")) as request:
                result = djtasks.add.enqueue(2, 2)
            assert finished(result).status == TaskResultStatus.SUCCESSFUL
        finally:
            reset_task_queue()
    (span,) = [span for span in exporter.get_finished_spans() if span.name == f"mutexcron.task {TASK_TYPE}"
               and (span.attributes or {}).get("mutexcron.task_id") == result.id]
    assert span.parent is not None and span.parent.span_id == request.get_span_context().span_id
    assert REGISTRY.get_sample_value("mutexcron_tasks_total", counted) == before + 1


def test_a_finished_task_cannot_be_cancelled(worker: TaskQueue) -> None:
    result = finished(djtasks.add.enqueue(1, 2))

    assert mutexcron_tasks.cancel(result) is False
    assert djtasks.add.get_result(result.id).status == TaskResultStatus.SUCCESSFUL


@pytest.mark.usefixtures("on_redis")
def test_cancel_needs_a_result_of_a_mutexcron_backend() -> None:
    result = djtasks.add.using(backend="dummy").enqueue(1, 2)

    with pytest.raises(TypeError, match="needs a result of a MutexcronTaskBackend, not of DummyBackend"):
        mutexcron_tasks.cancel(result)


def test_a_task_that_raises_fails_with_its_exception_class_and_traceback(worker: TaskQueue) -> None:
    result = finished(djtasks.explode.enqueue("boom"))

    assert result.status == TaskResultStatus.FAILED
    assert djtasks.calls == [("explode", "boom")]
    assert worker.status(result.id) == TaskStatus.FAILED  # tried once, as Django's backends do
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert error.exception_class_path == "builtins.ValueError"
    assert "in explode" in error.traceback and error.traceback.rstrip().endswith("ValueError: boom")


def test_a_task_that_raises_keyboard_interrupt_fails_and_the_worker_runs_the_next_task(worker: TaskQueue) -> None:
    interrupted = finished(djtasks.interrupt.enqueue())
    after = finished(djtasks.add.enqueue(2, 3))

    assert interrupted.status == TaskResultStatus.FAILED
    assert interrupted.errors[0].exception_class is KeyboardInterrupt
    assert after.status == TaskResultStatus.SUCCESSFUL and worker.worker_alive


def test_a_task_claimed_but_not_yet_begun_is_ready_so_a_running_result_always_has_its_start(
        configured: None, queue_url: str) -> None:
    """Between a worker's claim (the queue's status RUNNING) and the write that stamps the start, the result is
    READY with no started_at; from that write on it is RUNNING with its started_at."""
    from mutexcron_django.tasks.backend import run_django_task

    claimed, go = threading.Event(), threading.Event()
    seen_running: list[Any] = []

    def begin_late(payload: Any) -> None:  # the worker has claimed the task and not begun it yet
        claimed.set()
        go.wait(10)
        run_django_task(payload)

    handlers = HandlerRegistry()
    handlers.add(Handler(TASK_TYPE, begin_late, max_attempts=1))
    with TaskQueue(queue_url, handlers=handlers) as late_worker:
        late_worker.start([TASK_TYPE])
        result = djtasks.add.enqueue(1, 2)
        assert claimed.wait(10)
        assert get_task_queue().status(result.id) == TaskStatus.RUNNING
        result.refresh()
        assert (result.status, result.started_at) == (TaskResultStatus.READY, None)

        def running(sender: Any, task_result: Any, **_: Any) -> None:
            seen_running.append(task_backends["default"].get_result(task_result.id))

        task_started.connect(running)
        try:
            go.set()
            finished(result)
        finally:
            task_started.disconnect(running)
    (during,) = seen_running
    assert during.status == TaskResultStatus.RUNNING and during.started_at is not None
    assert result.started_at == during.started_at


def test_a_failed_task_retried_runs_again_and_keeps_every_attempts_error(worker: TaskQueue) -> None:
    result = finished(djtasks.explode.enqueue("again"))

    assert worker.retry(result.id) is True
    wait_for(lambda: len(djtasks.calls) == 2, what="the second attempt")
    finished(result)

    assert result.status == TaskResultStatus.FAILED
    assert [error.exception_class for error in result.errors] == [ValueError, ValueError]
    assert result.attempts == 2 and result.worker_ids == [worker.worker_id] * 2


def test_a_return_value_that_is_not_json_fails_the_task(worker: TaskQueue) -> None:
    result = finished(djtasks.not_json.enqueue())

    assert result.status == TaskResultStatus.FAILED and djtasks.calls == [("not_json", None)]
    assert result.errors[0].exception_class is TypeError


def test_a_task_that_takes_context_gets_its_result_and_attempt(redis_worker: TaskQueue) -> None:
    result = finished(djtasks.with_context.enqueue("ctx"))

    assert result.return_value == {"id": result.id, "attempt": 1, "tag": "ctx", "status": "RUNNING"}


def test_an_async_task_runs_to_completion(redis_worker: TaskQueue) -> None:
    result = finished(djtasks.asleep.enqueue(0.05))

    assert result.return_value == "awake" and djtasks.calls == [("asleep", 0.05)]


def test_the_worker_sends_task_started_and_task_finished(redis_worker: TaskQueue) -> None:
    sent: list[tuple[str, str, str]] = []

    def started(sender: Any, task_result: Any, **_: Any) -> None:
        sent.append(("started", task_result.id, task_result.status))

    def done(sender: Any, task_result: Any, **_: Any) -> None:
        sent.append(("finished", task_result.id, task_result.status))

    task_started.connect(started)
    task_finished.connect(done)
    try:
        ok = finished(djtasks.add.enqueue(1, 1))
        failed = finished(djtasks.explode.enqueue("signal"))
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(done)

    assert sent == [
        ("started", ok.id, TaskResultStatus.RUNNING), ("finished", ok.id, TaskResultStatus.SUCCESSFUL),
        ("started", failed.id, TaskResultStatus.RUNNING), ("finished", failed.id, TaskResultStatus.FAILED),
    ]


def test_aenqueue_and_aget_result(redis_worker: TaskQueue) -> None:
    async def roundtrip() -> Any:
        result = await djtasks.add.aenqueue(20, 22)
        for _ in range(300):
            found = await djtasks.add.aget_result(result.id)
            if found.is_finished:
                return found
            await asyncio.sleep(0.05)
        raise AssertionError("the task did not finish")

    assert asyncio.run(roundtrip()).return_value["total"] == 42


# -- results that do not exist -------------------------------------------------------------------------------


@pytest.mark.usefixtures("on_redis")
def test_get_result_of_an_unknown_id_raises_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("0123456789abcdef0123456789abcdef")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("")


@pytest.mark.usefixtures("on_redis")
def test_get_result_of_a_task_that_is_not_a_django_task_raises_does_not_exist() -> None:
    other = get_task_queue().schedule("handlerapp.echo", {"n": 1}, delay=timedelta(hours=1), require_handler=False)

    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(other)


@pytest.mark.usefixtures("on_redis")
def test_get_result_through_another_task_is_a_mismatch() -> None:
    result = djtasks.add.enqueue(1, 2)

    with pytest.raises(TaskResultMismatch):
        djtasks.explode.get_result(result.id)


# -- manage.py mutexcron worker runs django.tasks tasks ----------------------------------------------------


def test_the_worker_command_runs_django_tasks_in_its_own_process(tmp_path: Path, on_redis: None,
                                                                 redis_url: str) -> None:
    worker = WorkerProcess(tmp_path, redis_url)
    try:
        worker.start("--types", "django.tasks")
        wait_for(worker.started, what="the worker's start-up line")
        result = djtasks.add.using(run_after=datetime.now(UTC) + timedelta(seconds=0.5)).enqueue(7, 8, label="far")
        cancelled = djtasks.add.using(run_after=datetime.now(UTC) + timedelta(seconds=0.5)).enqueue(0, 0)
        assert mutexcron_tasks.cancel(cancelled)
        finished(result)
        assert worker.stop(__import__("signal").SIGTERM) == 0, worker.stderr
    finally:
        worker.kill()

    assert "running django.tasks on <RedisTaskBackend" in worker.stdout
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"label": "far", "total": 15, "pair": [7, 8]}
    assert worker.process is not None and result.worker_ids[0].endswith(f":{worker.process.pid}")
    assert worker.lines() == ["add (7, 8, 'far')"]  # the cancelled one never ran
    assert djtasks.calls == []  # and nothing ran in this process
    assert json.loads(json.dumps(result.args)) == [7, 8]

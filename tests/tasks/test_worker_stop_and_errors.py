"""``TaskQueue.stop()`` sticks until a worker ends on it, and the task errors name what went wrong: a
malformed task type (``InvalidTaskType``), a bad handler declaration (``TaskHandlerError``), two handlers
for one type (``DuplicateTaskHandler``), each still the error that was raised before."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from mutexcron.errors import JobDefinitionError
from mutexcron.tasks import (
    DuplicateTaskHandler,
    HandlerRegistry,
    InvalidTaskType,
    TaskError,
    TaskHandlerError,
    TaskQueue,
    TaskStatus,
    UnknownTaskType,
    task_handler,
)
from mutexcron.tasks.handlers import validate_task_type
from tests.support import wait_until


@pytest.fixture
def queue(redis_tasks_url: str) -> Iterator[TaskQueue]:
    handlers = HandlerRegistry()
    task_handler("stop.task", registry=handlers)(lambda payload: None)
    with TaskQueue(redis_tasks_url, handlers=handlers) as queue:
        yield queue


def test_a_stop_asked_before_run_worker_ends_it_at_once_and_a_later_call_runs_again(queue: TaskQueue) -> None:
    task_id = queue.schedule("stop.task", 1)
    queue.stop(timeout=0)
    started = time.monotonic()
    queue.run_worker()
    assert time.monotonic() - started < 5
    assert queue.status(task_id) == TaskStatus.SCHEDULED  # the stopped worker ran nothing

    worker = threading.Thread(target=queue.run_worker)
    worker.start()
    wait_until(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="the next run_worker() to run it")
    queue.stop(timeout=0)
    worker.join(10)
    assert not worker.is_alive()


def test_a_stop_asked_while_run_worker_runs_ends_it_with_a_single_call(queue: TaskQueue) -> None:
    queue.schedule("stop.task", 1, delay=timedelta(hours=1))
    worker = threading.Thread(target=queue.run_worker)
    worker.start()
    queue.stop(timeout=0)  # before or after the worker began consuming: either way it ends
    worker.join(10)
    assert not worker.is_alive()


@pytest.mark.parametrize("task_type", ["", "has space", "a@b", "-leading", "x" * 101, 3, None])
def test_a_malformed_task_type_is_an_invalid_task_type_which_is_an_unknown_task_type(task_type: Any) -> None:
    with pytest.raises(InvalidTaskType, match="is invalid") as raised:
        validate_task_type(task_type)
    assert isinstance(raised.value, UnknownTaskType) and isinstance(raised.value, ValueError)
    with pytest.raises(UnknownTaskType):
        task_handler(task_type, registry=HandlerRegistry())


def test_an_unregistered_task_type_is_unknown_but_not_invalid() -> None:
    with pytest.raises(UnknownTaskType) as raised:
        HandlerRegistry().get("valid.but.unregistered")
    assert not isinstance(raised.value, InvalidTaskType)


def test_two_handlers_for_one_type_is_a_duplicate_task_handler_and_still_a_job_definition_error() -> None:
    handlers = HandlerRegistry()
    task_handler("dup.task", registry=handlers)(lambda payload: None)
    with pytest.raises(DuplicateTaskHandler, match="has two handlers") as raised:
        task_handler("dup.task", registry=handlers)(lambda payload: 1)
    assert isinstance(raised.value, JobDefinitionError) and isinstance(raised.value, TaskError)


@pytest.mark.parametrize("options", [{"max_attempts": 0}, {"backoff": timedelta(0)}])
def test_bad_handler_options_are_a_task_handler_error(options: dict[str, Any]) -> None:
    with pytest.raises(TaskHandlerError, match=r"'opts\.task'") as raised:
        task_handler("opts.task", registry=HandlerRegistry(), **options)
    assert isinstance(raised.value, JobDefinitionError) and not isinstance(raised.value, DuplicateTaskHandler)

"""``schedule()`` refuses a task type that no handler of the process knows (a typo would wait forever, never run),
unless the caller says its handlers run elsewhere: ``require_handler=False`` on the call, or a producer-only queue
(``TaskQueue(..., require_handlers=False)``). On Redis, with a key prefix of each test's own."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from mutexcron.errors import StoreConfigError
from mutexcron.tasks import (
    HandlerRegistry,
    InvalidTaskType,
    PayloadError,
    TaskQueue,
    TaskStatus,
    UnknownTaskType,
    task_handler,
)
from mutexcron.tasks.job_runs import TASK_TYPE as JOB_TASK_TYPE
from tests.support import wait_until

HOUR = timedelta(hours=1)


@pytest.fixture
def handlers() -> HandlerRegistry:
    registry = HandlerRegistry()
    task_handler("known.task", registry=registry)(lambda payload: None)
    return registry


@pytest.fixture
def queue(redis_tasks_url: str, handlers: HandlerRegistry) -> Iterator[TaskQueue]:
    with TaskQueue(redis_tasks_url, handlers=handlers) as queue:
        yield queue


@pytest.fixture
def producer_only(redis_tasks_url: str) -> Iterator[TaskQueue]:
    with TaskQueue(redis_tasks_url, handlers=HandlerRegistry(), require_handlers=False) as queue:
        yield queue


def test_scheduling_a_type_no_handler_knows_raises_unknown_task_type_naming_it_and_stores_nothing(
        queue: TaskQueue) -> None:
    with pytest.raises(UnknownTaskType, match=r"'knwon\.task' .*registered: known\.task.*require_handler=False"):
        queue.schedule("knwon.task", 1, task_id="typo-1")

    assert queue.status("typo-1") == TaskStatus.UNKNOWN


def test_schedule_many_stores_none_of_a_batch_with_a_type_no_handler_knows(queue: TaskQueue) -> None:
    batch = [("known.task", 1, {"task_id": "batch-1"}), ("knwon.task", 2, {"task_id": "batch-2"})]
    with pytest.raises(UnknownTaskType, match=r"'knwon\.task'"):
        queue.schedule_many(batch)

    assert [queue.status(task_id) for task_id in ("batch-1", "batch-2")] == [TaskStatus.UNKNOWN] * 2


def test_require_handler_false_schedules_a_type_whose_handler_runs_in_another_queue(
        queue: TaskQueue, redis_tasks_url: str) -> None:
    task_id = queue.schedule("elsewhere.task", "x", require_handler=False)
    ran: list[object] = []
    elsewhere = HandlerRegistry()
    task_handler("elsewhere.task", registry=elsewhere)(ran.append)
    with TaskQueue(redis_tasks_url, handlers=elsewhere) as worker:
        worker.start()
        wait_until(lambda: worker.status(task_id) == TaskStatus.SUCCEEDED, what="the other queue's worker to run it")
    assert ran == ["x"]


def test_a_producer_only_queue_schedules_any_valid_type(producer_only: TaskQueue) -> None:
    one = producer_only.schedule("handled.elsewhere", 1, delay=HOUR)
    (many,) = producer_only.schedule_many([("handled.elsewhere", 2, {"delay": HOUR})])

    assert [producer_only.status(task_id) for task_id in (one, many)] == [TaskStatus.SCHEDULED] * 2


def test_a_producer_only_queue_still_refuses_a_malformed_type(producer_only: TaskQueue) -> None:
    with pytest.raises(InvalidTaskType, match="is invalid"):
        producer_only.schedule("has space", 1)


def test_require_handler_true_on_the_call_checks_even_on_a_producer_only_queue(producer_only: TaskQueue) -> None:
    with pytest.raises(UnknownTaskType, match=r"'handled\.elsewhere'"):
        producer_only.schedule("handled.elsewhere", 1, require_handler=True)


def test_the_tick_task_of_a_run_on_tasks_job_needs_no_handler_in_the_scheduling_process(queue: TaskQueue) -> None:
    """A scheduler enqueues its run_on="tasks" ticks; only the workers register their handler."""
    task_id = queue.schedule(JOB_TASK_TYPE, {"any": "payload"}, delay=HOUR)

    assert queue.status(task_id) == TaskStatus.SCHEDULED


def test_require_handlers_not_a_bool_is_a_store_config_error_naming_it(redis_tasks_url: str) -> None:
    with pytest.raises(StoreConfigError, match="require_handlers must be True or False, not 'no'"):
        TaskQueue(redis_tasks_url, require_handlers="no")  # type: ignore[arg-type]


def test_require_handler_not_a_bool_is_a_payload_error_naming_it(queue: TaskQueue) -> None:
    with pytest.raises(PayloadError, match="require_handler must be True, False or None, not 'no'"):
        queue.schedule("known.task", 1, require_handler="no")  # type: ignore[arg-type]

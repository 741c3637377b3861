"""Fixtures of the task queue tests: a Redis task backend URL, record store and client of each test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from mutexcron.tasks import HandlerRegistry, TaskQueue
from mutexcron.tasks.records.redis import RedisTaskRecords


@pytest.fixture
def redis_tasks_url(redis_url: str) -> str:
    """A Redis task backend URL whose keys (``<test prefix>{tasks}:…``) are this test's alone."""
    return redis_url


@pytest.fixture
def redis_client(redis_server_url: str) -> Iterator[redis.Redis]:
    """A plain client of the test Redis, for looking at keys directly."""
    client = redis.Redis.from_url(redis_server_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def redis_records(redis_url: str) -> Iterator[RedisTaskRecords]:
    """A Redis task record store whose keys are this test's alone."""
    store = RedisTaskRecords.from_url(redis_url)
    yield store
    store.close()


@pytest.fixture
def worker_queue(redis_tasks_url: str) -> Iterator[TaskQueue]:
    """A Redis task queue of this test's own, with a handler registry of its own, as worker ``worker-1``."""
    queue = TaskQueue(redis_tasks_url, handlers=HandlerRegistry(), worker_id="worker-1")
    yield queue
    queue.close()

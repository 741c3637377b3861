"""What the Redis task backend and the Redis task records share: one reading of a task's hash (lenient with a hash
written by hand), one eviction_policy() for every Redis-backed piece, and the backend's one id-to-type lookup."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis

from mutexcron.redis.client import RedisClient
from mutexcron.stores.redis import RedisLockStore
from mutexcron.tasks import TaskStatus
from mutexcron.tasks.backends.redis.backend import RedisTaskBackend
from mutexcron.tasks.records.base import TaskRecord
from mutexcron.tasks.records.redis import RedisTaskRecords, record_from_hash

EPOCH = datetime.fromtimestamp(0, UTC)


@pytest.fixture
def marks(redis_url: str) -> Iterator[RedisTaskRecords]:
    store = RedisTaskRecords.from_url(redis_url)
    yield store
    store.close()


@pytest.fixture
def backend(redis_url: str) -> Iterator[RedisTaskBackend]:
    made = RedisTaskBackend.from_url(redis_url)
    yield made
    made.close()


def test_a_hash_without_fields_reads_with_the_defaults() -> None:
    assert record_from_hash("t1", {}) == TaskRecord(id="t1", task_type="", payload="", run_at=EPOCH,
                                                    status=TaskStatus.UNKNOWN, attempts=0, gen=1)


def test_a_record_written_by_hand_with_an_unknown_status_reads_unknown(marks: RedisTaskRecords,
                                                                       redis_client: redis.Redis) -> None:
    redis_client.hset(marks.key("by-hand"), mapping={"type": "t", "payload": "{}", "status": "half-done",
                                                     "run_at": "1000", "attempts": "2", "gen": "3"})

    record = marks.get("by-hand")

    assert record is not None and record.status is TaskStatus.UNKNOWN  # it raised ValueError before
    assert (record.task_type, record.run_at, record.attempts, record.gen) == ("t", datetime.fromtimestamp(1, UTC),
                                                                              2, 3)


def test_a_backend_task_written_by_hand_reads_as_a_record_does(backend: RedisTaskBackend,
                                                              redis_client: redis.Redis) -> None:
    redis_client.sadd(backend.types_key, "t")
    redis_client.hset(backend.task_key("t", "by-hand"), mapping={"type": "t", "payload": "", "status": "odd"})

    info = backend.info("by-hand")

    assert info is not None
    assert (info.task_type, info.payload, info.run_at, info.status, info.attempts, info.error) == (
        "t", "", EPOCH, TaskStatus.UNKNOWN, 0, None)  # an empty payload field still reads as the backend read it


@pytest.mark.parametrize("task_id", ["", None, 7], ids=repr)
def test_what_is_not_a_task_id_is_no_task_for_every_lookup(backend: RedisTaskBackend, task_id: object) -> None:
    assert backend.info(task_id) is None  # type: ignore[arg-type]
    assert backend.cancel(task_id) is False  # type: ignore[arg-type]
    assert backend.retry(task_id) is False  # type: ignore[arg-type]
    assert backend.store_result(task_id, "{}") is False  # type: ignore[arg-type]
    assert backend.load_result(task_id) is None  # type: ignore[arg-type]


def test_every_redis_piece_reads_the_eviction_policy_the_same_way(redis_url: str, backend: RedisTaskBackend,
                                                                  marks: RedisTaskRecords) -> None:
    with RedisLockStore.from_url(redis_url) as store:
        for piece in (store, backend, marks):
            assert type(piece).eviction_policy is RedisClient.eviction_policy
            assert piece.eviction_policy() == "noeviction"

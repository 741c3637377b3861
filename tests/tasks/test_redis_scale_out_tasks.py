"""The Redis task backend and the Redis record store on the shared Redis Cluster and through Sentinel: their
contracts unchanged, and what only a cluster has (each type's keys on its own slot, claims per slot, a worker's
wake-up channel on one node)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.crc import key_slot

from mutexcron.tasks import NewTask, TaskQueue, TaskStatus
from mutexcron.tasks.backends.redis.backend import RedisTaskBackend
from mutexcron.tasks.records.base import cancel_store_from_url
from mutexcron.tasks.records.redis import RedisTaskRecords
from tests.support import wait_until
from tests.support.scale_out import cluster_client
from tests.tasks.contract import Recorder, TaskQueueContract, TaskRecordStoreContract, queue_factory

UNREACHABLE = {"cluster": "redis+cluster://:secret@127.0.0.1:1,127.0.0.1:2",
               "sentinel": "redis+sentinel://:secret@127.0.0.1:1/mutexcron"}


class TestScaledOutRedisTaskQueue(TaskQueueContract):
    """The task queue contract on the cluster, then through Sentinel (``scale_out_url``)."""

    @pytest.fixture
    def queue_url(self, scale_out_url: str) -> str:
        return scale_out_url

    @pytest.fixture
    def unreachable_url(self, queue_url: str) -> str:
        return UNREACHABLE["cluster" if queue_url.startswith("redis+cluster") else "sentinel"]


class TestScaledOutRedisTaskRecords(TaskRecordStoreContract):
    """The record store (cancel store) contract on the cluster, then through Sentinel."""

    @pytest.fixture
    def marks(self, scale_out_url: str) -> Iterator[RedisTaskRecords]:
        with closing(RedisTaskRecords.from_url(scale_out_url)) as store:
            yield store


@pytest.fixture
def backend(cluster_url: str) -> Iterator[RedisTaskBackend]:
    made = RedisTaskBackend.from_url(cluster_url)
    yield made
    made.close()


def _tasks(task_type: str, count: int, delay: float = 3600) -> list[NewTask]:
    run_at = datetime.now(UTC) + timedelta(seconds=delay)
    return [NewTask(f"{task_type}-{n}", task_type, str(n), run_at) for n in range(count)]


def test_task_types_spread_over_the_masters(backend: RedisTaskBackend) -> None:
    types = [f"spread.{n}" for n in range(12)]
    backend.enqueue([task for task_type in types for task in _tasks(task_type, 2)])
    client = cluster_client()
    try:
        masters = {client.get_node_from_key(backend.due_key(task_type)).name for task_type in types}
        assert len(masters) == 3
        for task_type in types:
            slot = key_slot(backend.due_key(task_type).encode())
            assert {key_slot(backend.task_key(task_type, f"{task_type}-{n}").encode()) for n in range(2)} == {slot}
            assert client.zcard(backend.due_key(task_type)) == 2
    finally:
        client.close()
    assert backend.pending_counts() == dict.fromkeys(types, 2)
    assert len(backend.claim_groups(types)) == len({key_slot(backend.due_key(t).encode()) for t in types})


def test_a_claim_over_many_slots_stops_at_its_limit_and_in_turn_reaches_every_type(backend: RedisTaskBackend) -> None:
    types = [f"claims.{n}" for n in range(6)]
    backend.enqueue([task for task_type in types for task in _tasks(task_type, 3, delay=-1)])
    seen: list[str] = []
    for _ in range(6):
        _, next_ms, deliveries = backend.claim_batch(types, 4, "worker", [30_000] * len(types))
        assert (len(deliveries) == 4 and next_ms >= 0) or len(seen) + len(deliveries) == 18
        seen += [delivery.id for delivery in deliveries]
        for delivery in deliveries:
            delivery.ack()
    assert sorted(seen) == sorted(f"{t}-{n}" for t in types for n in range(3))


def test_lookups_by_id_find_the_type_of_a_task_another_process_scheduled(
    backend: RedisTaskBackend, cluster_url: str,
) -> None:
    backend.enqueue(_tasks("lookup.a", 1) + _tasks("lookup.b", 1))
    other = RedisTaskBackend.from_url(cluster_url)  # knows no id yet: asks every type
    try:
        assert other.type_of("lookup.b-0") == "lookup.b" and other.type_of("nope") is None
        assert other.cancel("lookup.b-0") and other.status("lookup.b-0") == TaskStatus.CANCELLED
        assert other.status("lookup.a-0") == TaskStatus.SCHEDULED
        assert other.store_result("lookup.a-0", "42") and other.load_result("lookup.a-0") == "42"
    finally:
        other.close()


def test_failed_tasks_of_every_type_newest_first(backend: RedisTaskBackend) -> None:
    for task_type in ("failed.a", "failed.b"):
        backend.enqueue(_tasks(task_type, 2, delay=-1))
    order = []
    for task_type in ("failed.b", "failed.a"):
        for delivery in backend.claim_batch([task_type], 10, "w", [30_000])[2]:
            delivery.fail("boom")
            order.append(delivery.id)
        # Failure times are whole milliseconds: the next type fails in a later one, so "newest" is one type.
        failed_in = time.time_ns() // 1_000_000
        wait_until(lambda since=failed_in: time.time_ns() // 1_000_000 > since + 1, timeout=1,  # type: ignore[misc]
                   what="the next millisecond")
    assert set(backend.failed()) == set(order) and backend.failed(limit=1) in ([order[-1]], [order[-2]])
    assert backend.retry(order[0]) and backend.status(order[0]) == TaskStatus.SCHEDULED


def test_the_cancel_store_takes_a_cluster_url(cluster_url: str) -> None:
    marks = cancel_store_from_url(cluster_url)
    try:
        assert isinstance(marks, RedisTaskRecords)
        marks.create(_tasks("records", 40))
        assert all(marks.get(f"records-{n}") is not None for n in range(40))
        marks.discard([f"records-{n}" for n in range(40)])  # keys of 40 slots
        assert marks.get("records-7") is None
    finally:
        marks.close()


def test_a_worker_on_the_cluster_runs_tasks_of_types_on_every_master(cluster_url: str) -> None:
    recorder = Recorder("cluster.task")
    types = [recorder.define(f"cluster.run.{n}") for n in range(6)]
    with queue_factory(recorder.handlers, cluster_url) as make:
        worker: TaskQueue = make()
        worker.start(types)
        producer = make()
        producer.schedule_many([(task_type, task_type) for task_type in types])
        for task_type in types:
            recorder.wait_for(task_type)
        later: Any = producer.schedule(types[0], "woken", delay=timedelta(milliseconds=300))
        assert recorder.at("woken") - datetime.now(UTC).timestamp() < 1
        assert producer.status(later) in (TaskStatus.RUNNING, TaskStatus.SUCCEEDED)


def test_every_redis_scheme_serves_the_task_backend_and_the_record_store() -> None:
    from mutexcron import plugins

    for kind in ("task_backend", "record_store"):
        assert {"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"} <= set(plugins.schemes(kind))



"""Jobs due at the same instant ask for their locks together (mutexcron.fire_batch), on a store that batches.

Each test counts the store calls of a real Redis store (a subclass that notes them); that every tick of a fleet
still runs once is the fleet tests' business (tests/test_fleet.py, tests/chaos/), which run on this path too.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron import JobContext, Registry, Scheduler, mutex_cron
from mutexcron.errors import StoreUnavailable
from mutexcron.stores import AcquireRequest, Acquisition, MemoryLockStore, RedisLockStore, store_from_url
from tests.support import wait_until

JOBS = 20


class CountingRedisStore(RedisLockStore):
    """A RedisLockStore that notes each acquire and the size of each acquire_many."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []
        self.single: list[str] = []
        self._noted = threading.Lock()

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
        with self._noted:
            self.batches.append(len(requests))
        return super().acquire_many(requests)

    def acquire(self, name: str, **options: Any) -> Acquisition:
        with self._noted:
            self.single.append(name)
        return super().acquire(name, **options)


def counting_store(url: str) -> CountingRedisStore:
    plain = store_from_url(url)
    assert isinstance(plain, RedisLockStore)
    return CountingRedisStore(plain.client, prefix=plain.prefix)


@pytest.fixture
def runs() -> Counter[tuple[str, datetime]]:
    return Counter()


def declare_every_second(registry: Registry, runs: Counter[tuple[str, datetime]], count: int = JOBS,
                         **options: Any) -> list[str]:
    names = [f"batch.{n:02d}" for n in range(count)]
    lock = threading.Lock()

    def body(ctx: JobContext) -> None:
        with lock:
            runs[(ctx.job_name, ctx.fire_time)] += 1

    for name in names:
        mutex_cron("* * * * * *", name=name, registry=registry, **options)(body)
    return names


def test_the_locks_of_jobs_due_at_one_instant_are_asked_for_together(
    redis_url: str, registry: Registry, new_scheduler: Callable[..., Scheduler], runs: Counter[tuple[str, datetime]]
) -> None:
    names = declare_every_second(registry, runs)
    store = counting_store(redis_url)
    new_scheduler(store).start()
    wait_until(lambda: all(sum(n == name for n, _ in runs) >= 3 for name in names), timeout=10,
               what="three ticks of every job")
    assert store.single == []  # no scheduled fire asked on its own
    assert sum(store.batches) >= 3 * JOBS
    assert max(store.batches) > 1, store.batches
    assert len(store.batches) < sum(store.batches) / 2, store.batches  # far fewer round trips than fires
    assert set(runs.values()) == {1}  # each job's tick ran once


def test_two_instances_batching_run_each_tick_of_each_job_once(
    redis_url: str, registry: Registry, new_scheduler: Callable[..., Scheduler], runs: Counter[tuple[str, datetime]]
) -> None:
    names = declare_every_second(registry, runs)
    first, second = counting_store(redis_url), counting_store(redis_url)
    new_scheduler(first, "A").start()
    new_scheduler(second, "B").start()
    wait_until(lambda: all(sum(n == name for n, _ in runs) >= 3 for name in names), timeout=10,
               what="three ticks of every job")
    assert set(runs.values()) == {1}
    assert max(first.batches) > 1 and max(second.batches) > 1


def test_a_store_that_does_not_batch_is_asked_fire_by_fire(
    registry: Registry, new_scheduler: Callable[..., Scheduler], runs: Counter[tuple[str, datetime]]
) -> None:
    class CountingMemory(MemoryLockStore):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[int] = []

        def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
            self.batches.append(len(requests))
            return super().acquire_many(requests)

    names = declare_every_second(registry, runs, count=5)
    store = CountingMemory()
    new_scheduler(store).start()
    wait_until(lambda: all(sum(n == name for n, _ in runs) >= 2 for name in names), timeout=10,
               what="two ticks of every job")
    assert store.batches == []


def test_a_job_that_catches_up_asks_for_its_lock_on_its_own(
    redis_url: str, registry: Registry, new_scheduler: Callable[..., Scheduler], runs: Counter[tuple[str, datetime]]
) -> None:
    declare_every_second(registry, runs, count=3)
    mutex_cron("* * * * * *", name="catches.up", registry=registry, catch_up="latest")(
        lambda ctx: runs.update([(ctx.job_name, ctx.fire_time)]))
    store = counting_store(redis_url)
    new_scheduler(store).start()
    wait_until(lambda: sum(n == "catches.up" for n, _ in runs) >= 2, timeout=10, what="two ticks of catches.up")
    assert "catches.up" in store.single
    assert all(size <= 3 for size in store.batches)


def test_a_batch_on_an_unreachable_store_skips_every_fire_as_a_store_error(
    registry: Registry, new_scheduler: Callable[..., Scheduler], runs: Counter[tuple[str, datetime]]
) -> None:
    names = declare_every_second(registry, runs, count=5)
    store = counting_store("redis://127.0.0.1:1/0?socket_connect_timeout=0.2")
    outcomes: Counter[str] = Counter()
    scheduler = new_scheduler(store)
    scheduler.add_listener(lambda record: outcomes.update([str(record.outcome)]))
    scheduler.start()
    wait_until(lambda: outcomes["skipped_store_error"] >= 2 * len(names), timeout=10,
               what="two ticks of store errors")
    assert runs == Counter() and set(outcomes) == {"skipped_store_error"}
    assert max(store.batches) > 1


def test_one_redis_server_batches_and_a_cluster_is_asked_fire_by_fire(redis_url: str, cluster_url: str) -> None:
    """On a cluster redis-py's pipeline sends each script's text and groups the calls in Python: measured slower
    (bench/fleet.py) than the calls one by one in threads, so the scheduler does not batch there; acquire_many
    itself still answers on a cluster (the lock store contract runs there too)."""
    single, cluster = store_from_url(redis_url), store_from_url(cluster_url)
    try:
        assert single.batches_acquires is True
        assert cluster.batches_acquires is False
        assert MemoryLockStore().batches_acquires is False
    finally:
        single.close()
        cluster.close()


def test_the_busy_fires_of_one_instant_wait_out_their_locks_together(
    redis_url: str, registry: Registry, new_scheduler: Callable[..., Scheduler], runs: Counter[tuple[str, datetime]]
) -> None:
    """Six jobs whose locks a dead instance holds (an earlier tick, 1.5 s of lease left): their busy fires are asked
    again together, one acquire_many a round from one worker thread (not one thread and one acquire per job,
    which a small pool cannot afford), and each runs the tick it waited for once the lease ends."""
    names = declare_every_second(registry, runs, count=6)
    store = counting_store(redis_url)
    store.seed(names)
    for name in names:
        assert store.acquire(name, owner="dead", lease=timedelta(seconds=1.5),
                             fire_time=datetime(2026, 1, 1, tzinfo=UTC)).acquired
    store.single.clear()
    new_scheduler(store, max_workers=2, busy_grace=timedelta(seconds=3)).start()
    wait_until(lambda: all(sum(n == name for n, _ in runs) >= 3 for name in names), timeout=15,
               what="three ticks of every job")
    assert set(runs.values()) == {1}
    assert store.single == []  # the retries too went through acquire_many
    assert store.batches.count(len(names)) >= 3, store.batches  # the first ask, then at least two rounds together
    first_ticks = sorted({fire for _, fire in runs})[:1]
    assert all(runs[(name, first_ticks[0])] == 1 for name in names)  # the tick each waited for, run once

"""Jobs due at the same instant ask for their locks together (mutexcron.scheduling.batch), on a store that batches.

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
from mutexcron.scheduling import batch
from mutexcron.scheduling.batch import FireBatch
from mutexcron.scheduling.fires import DueFire
from mutexcron.stores import AcquireRequest, Acquisition, MemoryLockStore, RedisLockStore, store_from_url
from tests.support import wait_until
from tests.support.servers import PrivateRedis

JOBS = 20
TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)


class CountingRedisStore(RedisLockStore):
    """A RedisLockStore that notes the size of each acquire_many and each acquire made outside one (a batch of one,
    such as a busy fire asked again alone, is an acquire_many that the store answers with acquire())."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []
        self.asked_together: list[list[str]] = []  # the job names of each acquire_many
        self.single: list[str] = []
        self.first_asked: dict[str, datetime | None] = {}  # each job's first tick asked for
        self._noted = threading.Lock()
        self._in_batch = threading.local()

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
        with self._noted:
            self.batches.append(len(requests))
            self.asked_together.append([request.name for request in requests])
            for request in requests:
                self.first_asked.setdefault(request.name, request.fire_time)
        self._in_batch.on = True
        try:
            return super().acquire_many(requests)
        finally:
            self._in_batch.on = False

    def acquire(self, name: str, **options: Any) -> Acquisition:
        if not getattr(self._in_batch, "on", False):
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


def test_the_fires_of_one_pass_of_the_scheduler_go_in_one_acquire_many(
    redis_url: str, registry: Registry, new_scheduler: Callable[..., Scheduler], runs: Counter[tuple[str, datetime]]
) -> None:
    """Every job is due at each whole second: each pass of APScheduler's loop hands over all of them, and the batch
    waits for the pass to end (PassingScheduler) rather than leave with the first few."""
    names = declare_every_second(registry, runs)
    store = counting_store(redis_url)
    new_scheduler(store).start()
    wait_until(lambda: all(sum(n == name for n, _ in runs) >= 3 for name in names), timeout=10,
               what="three ticks of every job")
    assert store.batches[:3] == [JOBS, JOBS, JOBS]
    assert set(runs.values()) == {1}


def test_a_long_pass_is_asked_for_every_flush_at_fires_without_waiting_for_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thousands of jobs due at once make a pass of hundreds of ms: a flush is queued each time FLUSH_AT fires are
    waiting, and takes every fire queued by the time a worker runs it; the rest go when the pass ends."""
    monkeypatch.setattr(batch, "FLUSH_AT", 3)
    queued: list[Callable[[], object]] = []
    asked: list[list[str]] = []

    class Pool:
        """Keeps the flushes queued, for the test to run them as a worker thread would."""

        def submit(self, call: Callable[[], object]) -> bool:
            queued.append(call)
            return True

    fires = FireBatch(Pool(), lambda made, hand_off: asked.append([str(fire) for fire in made]))  # type: ignore[arg-type]

    def add(n: int) -> None:
        fires.add(DueFire(f"job.{n}", TICK, None, TICK), lambda due: due.name)  # type: ignore[arg-type,return-value]

    with fires.gathering():
        for n in range(3):
            add(n)
        assert len(queued) == 1  # queued at the third, while the pass goes on
        add(3)
        add(4)
        assert len(queued) == 1  # the queued flush has not taken its fires yet: they join it
        queued[0]()
        assert asked == [["job.0", "job.1", "job.2", "job.3", "job.4"]]
        add(5)
        add(6)
        assert len(queued) == 1
    assert len(queued) == 2  # the pass ended with two fires left
    queued[1]()
    assert asked[1] == ["job.5", "job.6"]


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
    assert store.batches and set(store.batches) == {1}  # each fire a batch of one


def test_a_job_that_catches_up_asks_for_its_lock_on_its_own(
    redis_url: str, registry: Registry, new_scheduler: Callable[..., Scheduler], runs: Counter[tuple[str, datetime]]
) -> None:
    declare_every_second(registry, runs, count=3)
    mutex_cron("* * * * * *", name="catches.up", registry=registry, catch_up="latest")(
        lambda ctx: runs.update([(ctx.job_name, ctx.fire_time)]))
    store = counting_store(redis_url)
    new_scheduler(store).start()
    wait_until(lambda: sum(n == "catches.up" for n, _ in runs) >= 2, timeout=10, what="two ticks of catches.up")
    alone = [names for names in store.asked_together if "catches.up" in names]
    assert alone and all(names == ["catches.up"] for names in alone)
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


def test_redis_batches_on_one_server_and_on_a_cluster_and_memory_does_not(redis_url: str, cluster_url: str) -> None:
    single, cluster = store_from_url(redis_url), store_from_url(cluster_url)
    try:
        assert single.batches_acquires is True
        assert cluster.batches_acquires is True
        assert MemoryLockStore().batches_acquires is False
    finally:
        single.close()
        cluster.close()


def _masters_of(store: RedisLockStore, names: list[str]) -> set[str]:
    client: Any = store.client
    return {client.get_node_from_key(store.key(name)).name for name in names}


def test_on_a_cluster_acquire_many_sends_one_script_per_master(
    cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The locks of one batch lie in many slots (one hash tag per job), which a script's declared keys may not
    span: each master gets one EVALSHA (ACQUIRE_ON_MASTER) with the keys it serves in its argument."""
    import redis.client

    store = store_from_url(cluster_url)
    assert isinstance(store, RedisLockStore)
    names, warm = [f"spread.{n}" for n in range(30)], [f"warm.{n}" for n in range(30)]
    store.seed(names + warm)
    store.acquire_many([AcquireRequest(name, "A", timedelta(seconds=30), TICK, None) for name in warm])  # loaded
    sent: list[tuple[str, int]] = []
    execute = redis.client.Redis.execute_command

    def noted(client: Any, *args: Any, **options: Any) -> Any:
        sent.append((str(args[0]), client.get_connection_kwargs()["port"]))
        return execute(client, *args, **options)

    monkeypatch.setattr(redis.client.Redis, "execute_command", noted)
    try:
        answers = store.acquire_many([AcquireRequest(name, "A", timedelta(seconds=30), TICK, None) for name in names])
        assert all(isinstance(answer, Acquisition) and answer.acquired for answer in answers), answers
        masters = _masters_of(store, names)
        assert len(masters) > 1
        assert sorted(sent) == sorted(("EVALSHA", int(master.rpartition(":")[2])) for master in masters)
        assert [store.lock(name).token for name in names] == [a.token for a in answers]  # type: ignore[union-attr]
    finally:
        store.close()


def test_on_a_cluster_a_master_that_lost_the_scripts_still_answers_each_acquire(cluster_url: str) -> None:
    """After SCRIPT FLUSH on every master (as after a failover to a replica that never ran them), each master's
    script is loaded again where EVALSHA could not run it: each answer stands, and a tick taken in the batch is
    taken once."""
    store = store_from_url(cluster_url)
    assert isinstance(store, RedisLockStore)
    client: Any = store.client
    names = [f"flushed.{n}" for n in range(12)]
    try:
        store.seed(names)
        for node in client.get_primaries():
            client.get_redis_connection(node).script_flush()
        first = store.acquire_many([AcquireRequest(name, "A", timedelta(seconds=30), TICK, None) for name in names])
        assert all(isinstance(answer, Acquisition) and answer.acquired for answer in first), first
        again = store.acquire_many([AcquireRequest(name, "B", timedelta(seconds=30), TICK, None) for name in names])
        assert all(isinstance(answer, Acquisition) and not answer.acquired for answer in again), again
    finally:
        store.close()


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
    # The tick each waited for, run once (the jobs' first ticks differ when their start straddles a second).
    assert all(runs[(name, store.first_asked[name])] == 1 for name in names), (store.first_asked, runs)


def test_acquire_many_on_one_redis_server_is_one_command() -> None:
    # One script for all the locks of an instant: one command for the instance to send and one reply to read,
    # not a pipeline of one script per lock (a private server, so that its command counts are this test's own).
    with PrivateRedis() as url:
        store = store_from_url(url)
        names = [f"job.{n}" for n in range(JOBS)]
        store.acquire_many([AcquireRequest(name, "warm-up", timedelta(seconds=30), None) for name in names])
        assert isinstance(store, RedisLockStore)
        store.client.config_resetstat()
        answers = store.acquire_many([AcquireRequest(name, "A", timedelta(seconds=30), TICK) for name in names])
        stats = store.client.info("commandstats")
        assert [answer.status for answer in answers if isinstance(answer, Acquisition)] == ["busy"] * JOBS
        assert stats["cmdstat_evalsha"]["calls"] == 1, stats
        assert not {name for name in stats if name.startswith("cmdstat_eval") and name != "cmdstat_evalsha"}, stats

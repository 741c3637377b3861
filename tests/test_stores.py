"""Every lock store passes the same contracts (tests/contract.py), against the real servers; the control verbs, built
once on the stores' primitives, are proven whole on the memory store and by a sample on each real one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron.stores import AcquireRequest, AcquireStatus, Acquisition, LockStore, MemoryLockStore, store_from_url
from mutexcron.stores.mongo import MongoLockStore
from mutexcron.stores.redis import RedisLockStore
from tests.contract import ControlSchedulerContract, StoreContract, VerbsContract, VerbsSampleContract


class TestMemoryLockStore(StoreContract, VerbsContract, ControlSchedulerContract):
    @pytest.fixture(autouse=True)
    def _store(self) -> None:
        self.store = MemoryLockStore()


class TestRedisLockStore(StoreContract, VerbsSampleContract, ControlSchedulerContract):
    @pytest.fixture(autouse=True)
    def _store(self, redis_url: str) -> Iterator[None]:
        self.store = store_from_url(redis_url)
        yield
        self.store.close()


class TestRedisClusterLockStore(StoreContract, VerbsSampleContract, ControlSchedulerContract):
    """The contract on the shared Redis Cluster (3 masters, 3 replicas): each job's hash is in its own slot."""

    @pytest.fixture(autouse=True)
    def _store(self, cluster_url: str) -> Iterator[None]:
        self.store = store_from_url(cluster_url)
        yield
        self.store.close()


class TestRedisSentinelLockStore(StoreContract, VerbsSampleContract, ControlSchedulerContract):
    """The contract on the master that the shared Sentinel group names."""

    @pytest.fixture(autouse=True)
    def _store(self, sentinel_url: str) -> Iterator[None]:
        self.store = store_from_url(sentinel_url)
        yield
        self.store.close()


class TestRedisLockStoreWaitingForReplicas(StoreContract):
    """The store's verbs with ``wait_replicas=1`` (WAIT after each write): on the cluster (on the key's master) and
    through Sentinel."""

    @pytest.fixture(autouse=True, params=["cluster_url", "sentinel_url"], ids=["cluster", "sentinel"])
    def _store(self, request: pytest.FixtureRequest) -> Iterator[None]:
        self.store = store_from_url(f"{request.getfixturevalue(request.param)}&wait_replicas=1&wait_timeout=2000")
        yield
        self.store.close()


class TestMongoLockStore(StoreContract, VerbsSampleContract, ControlSchedulerContract):
    @pytest.fixture(autouse=True)
    def _store(self, mongo_url: str) -> Iterator[None]:
        self.store = store_from_url(mongo_url)
        yield
        self.store.close()


# -- the server stores' own documents: from before run-time control (issue 9) and alerts (issue 10), and refusals
# that write nothing, and text that looks like a field path --

LONG = timedelta(seconds=30)
FIRE = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)


@pytest.fixture(params=["redis_url", "cluster_url", "mongo_url"], ids=["redis", "cluster", "mongo"])
def server_store(request: pytest.FixtureRequest) -> Iterator[LockStore]:
    store = store_from_url(request.getfixturevalue(request.param))
    yield store
    store.close()


def raw_document(store: LockStore) -> dict[Any, Any] | None:
    """The job's hash or document as the server holds it, behind the store's back."""
    if isinstance(store, RedisLockStore):
        return store.client.hgetall(store.key("job")) or None
    assert isinstance(store, MongoLockStore)
    return store.collection.find_one({"_id": "job"})


def old_document(store: LockStore, *, tombstones: bool = True) -> None:
    """Write the job's hash or document as a version from before run-time control made it (token 3); without
    ``tombstones``, from before deleted jobs were kept as tombstones (no ``deleted`` field)."""
    if isinstance(store, RedisLockStore):
        fields = {"name": "job", "locked": "0", "token": "3", **({"deleted": "0"} if tombstones else {})}
        store.client.hset(store.key("job"), mapping=fields)  # type: ignore[arg-type]
    else:
        assert isinstance(store, MongoLockStore)
        store.collection.insert_one({"_id": "job", "name": "job", "locked": False, "token": 3})


def test_a_document_from_before_tombstones_is_acquired_once_a_tick(server_store: LockStore) -> None:
    old_document(server_store, tombstones=False)
    assert server_store.acquire("job", owner="a", lease=LONG, fire_time=FIRE).token == 4
    assert server_store.acquire("job", owner="b", lease=LONG, fire_time=FIRE).status is AcquireStatus.ALREADY_RAN
    [batch] = server_store.acquire_many([AcquireRequest("job", "b", LONG, FIRE + timedelta(minutes=1))])
    assert isinstance(batch, Acquisition) and batch.status is AcquireStatus.BUSY
    state = server_store.lock("job")
    assert state is not None and state.locked_by == "a" and state.token == 4


def test_a_document_from_before_run_time_control_is_unpaused_at_version_0(server_store: LockStore) -> None:
    old_document(server_store)
    state = server_store.lock("job")
    assert state is not None and not state.paused and state.schedule is None and state.schedule_version == 0
    stale = server_store.acquire("job", owner="a", lease=LONG, fire_time=FIRE, schedule_version=1)
    assert stale.status is AcquireStatus.STALE_SCHEDULE and stale.schedule_version == 0
    assert server_store.acquire("job", owner="a", lease=LONG, fire_time=FIRE, schedule_version=0).token == 4
    assert server_store.resume("job") == server_store.lock("job")
    changed = server_store.set_schedule("job", "0 * * * *", by="ops")
    assert changed is not None and changed.schedule_version == 1 and changed.token == 4 and changed.locked


def test_a_refused_acquire_writes_nothing_to_the_server(server_store: LockStore) -> None:
    server_store.seed(["job"])
    server_store.set_schedule("job", "0 * * * *")
    server_store.pause("job", until=server_store.now() + timedelta(hours=1), by="ops")
    paused = raw_document(server_store)
    for fire_time, version in [(FIRE, None), (FIRE, 0), (FIRE, 1), (None, None)]:
        refused = server_store.acquire("job", owner="a", lease=LONG, fire_time=fire_time, schedule_version=version)
        assert refused.status is AcquireStatus.PAUSED
    assert raw_document(server_store) == paused
    server_store.resume("job")
    resumed = raw_document(server_store)
    refused = server_store.acquire("job", owner="a", lease=LONG, fire_time=FIRE, schedule_version=0)
    assert refused.status is AcquireStatus.STALE_SCHEDULE and refused.schedule_version == 1
    assert raw_document(server_store) == resumed


def test_a_document_from_before_alerts_has_no_outcome_and_takes_one(server_store: LockStore) -> None:
    old_document(server_store)
    state = server_store.lock("job")
    assert state is not None and state.created_at is None and state.last_outcome is None
    assert state.last_finished_at is None and state.last_success_at is None and state.last_error is None
    assert state.incident is None and state.incident_at is None
    assert server_store.seed(["job"]) == 0
    assert server_store.lock("job") == state  # seeding an existing document neither resets it nor dates it
    server_store.delete("job")
    assert server_store.seed(["job"]) == 1
    revived = server_store.lock("job")
    assert revived is not None and revived.created_at is None and revived.token == 3
    acquisition = server_store.acquire("job", owner="a", lease=LONG, fire_time=FIRE)
    assert acquisition.token == 4
    assert server_store.release("job", token=4, outcome="failed", error="ValueError: boom")
    failed = server_store.lock("job")
    assert failed is not None and failed.last_outcome == "failed" and failed.last_error == "ValueError: boom"
    assert failed.last_finished_at is not None and failed.last_success_at is None and not failed.locked
    assert server_store.open_incident("job", "failing since 06:00")
    assert not server_store.open_incident("job", "failing since 06:00")
    assert server_store.close_incident("job", "failing since 06:00")


def test_a_document_from_before_alerts_takes_an_outcome_while_held(server_store: LockStore) -> None:
    old_document(server_store)
    token = server_store.acquire("job", owner="a", lease=LONG, fire_time=FIRE).token
    assert token == 4
    assert server_store.release("job", token=token, hold_at_least=LONG, outcome="succeeded")
    state = server_store.lock("job")
    assert state is not None and state.locked and state.last_outcome == "succeeded" and state.last_error is None
    assert state.last_success_at is not None and state.last_success_at == state.last_finished_at


def test_outcomes_and_incidents_that_look_like_field_paths_are_kept_as_text(server_store: LockStore) -> None:
    server_store.seed(["$job"])
    token = server_store.acquire("$job", owner="$owner", lease=LONG, fire_time=FIRE).token
    assert token is not None
    assert server_store.release("$job", token=token, outcome="failed", error="$last_success_at")
    assert server_store.open_incident("$job", "$incident_at")
    state = server_store.lock("$job")
    assert state is not None and state.name == "$job" and state.created_at is not None
    assert state.last_error == "$last_success_at" and state.incident == "$incident_at"
    assert server_store.close_incident("$job", "$incident_at")


def test_the_redis_store_lists_locks_beyond_one_read_batch(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import mutexcron.stores.redis as redis_store

    monkeypatch.setattr(redis_store, "READ_BATCH", 3)
    store = store_from_url(redis_url)
    try:
        names = [f"job.{n}" for n in range(8)]
        store.seed(names)
        token = store.acquire("job.6", owner="A", lease=timedelta(seconds=30),
                              fire_time=datetime(2026, 3, 1, tzinfo=UTC)).token
        assert isinstance(store, RedisLockStore)
        listed = store.locks()
        assert [state.name for state in listed] == names
        assert [state.name for state in listed if state.locked] == ["job.6"]
        assert next(state for state in listed if state.name == "job.6").token == token
    finally:
        store.close()

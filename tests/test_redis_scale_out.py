"""Redis Cluster and Sentinel URLs, and ``wait_replicas``: what the contract suites (tests/test_stores.py) do not
say. The shared cluster and Sentinel group are ``make services``' (tests/support/scale_out.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest import LogCaptureFixture
from redis.cluster import ClusterNode, RedisCluster

from mutexcron.errors import ReplicationUnconfirmed, StoreConfigError, StoreUnavailable
from mutexcron.records import Outcome
from mutexcron.redis.urls import LazyRedisCluster
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import AcquireRequest, AcquireStatus, ReleaseRequest, store_from_url
from mutexcron.stores.redis import DEFAULT_WAIT_TIMEOUT, RedisLockStore
from mutexcron.urls import mask_url
from tests.support.leaks import URL_TEMPLATES, SecretURL, assert_hidden, exception_texts, passwords, texts_while
from tests.support.leaks import _shown_anyway as shown_anyway
from tests.support.scale_out import cluster_client

LEASE = timedelta(seconds=30)
FIRE = datetime(2026, 3, 1, 6, 0, tzinfo=UTC)


@pytest.fixture
def stores() -> Iterator[Callable[[str], RedisLockStore]]:
    made: list[RedisLockStore] = []

    def make(url: str) -> RedisLockStore:
        store = store_from_url(url)
        assert isinstance(store, RedisLockStore)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


# -- URLs --------------------------------------------------------------------------------------------------


def test_a_cluster_url_gives_a_cluster_client_of_its_seed_nodes_that_connects_on_first_use(
    stores: Callable[[str], RedisLockStore],
) -> None:
    store = stores("rediss+cluster://app:S3cret@127.0.0.1:1,[::1]:2,node.invalid?prefix=p:&socket_timeout=3")
    client = store.client
    assert isinstance(client, LazyRedisCluster) and store.prefix == "p:"
    options = client._lazy_options
    nodes = [(node.host, node.port) for node in options["startup_nodes"]]
    assert nodes == [("127.0.0.1", 1), ("::1", 2), ("node.invalid", 6379)]
    assert (options["username"], options["password"], options["ssl"]) == ("app", "S3cret", True)
    assert options["socket_timeout"] == 3.0 and options["socket_connect_timeout"] == 2
    assert "S3cret" not in repr(store) and "not connected" in repr(client)
    with pytest.raises(StoreUnavailable) as raised:  # nothing listens there: a store error, as for one server
        store.lock("job")
    assert "S3cret" not in str(raised.value)


def test_a_sentinel_url_names_the_service_and_the_database(stores: Callable[[str], RedisLockStore]) -> None:
    store = stores("redis+sentinel://:S3cret@127.0.0.1:1,127.0.0.1/my-service/4?sentinel_password=Sent1nel")
    pool = store.client.connection_pool
    assert pool.service_name == "my-service" and pool.connection_kwargs["db"] == 4  # type: ignore[attr-defined]
    assert pool.connection_kwargs["password"] == "S3cret"
    sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [1, 26379]
    assert all(s.connection_pool.connection_kwargs["password"] == "Sent1nel" for s in sentinels)
    assert "S3cret" not in repr(store) and "Sent1nel" not in repr(store)
    with pytest.raises(StoreUnavailable) as raised:
        store.lock("job")
    assert "S3cret" not in str(raised.value) and "Sent1nel" not in str(raised.value)


def test_sentinel_password_is_masked_like_a_password() -> None:
    url = "redis+sentinel://h:26379/svc?prefix=x&sentinel_password=S3c"
    assert mask_url(url) == "redis+sentinel://h:26379/svc?prefix=x&sentinel_password=***"


SCALE_OUT_TEMPLATES = [template for template in URL_TEMPLATES if "+cluster" in template or "+sentinel" in template]
scale_out_secrets = st.tuples(st.sampled_from(SCALE_OUT_TEMPLATES), passwords).filter(
    lambda pair: not shown_anyway(*pair)
).map(lambda pair: SecretURL(pair[0].format(pair[1]), pair[1]))


def _texts_of_a_use(url: str) -> list[str]:
    """What building a store on ``url`` and asking it for a lock (nothing listens: it fails) shows."""
    try:
        store = store_from_url(url)
    except StoreConfigError as error:
        return exception_texts(error)
    texts = [repr(store), repr(store.client)]
    try:
        store.lock("job")
    except StoreUnavailable as error:
        texts += exception_texts(error)
    finally:
        store.close()
    return texts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=scale_out_secrets)
def test_cluster_and_sentinel_urls_never_show_the_password(secret: SecretURL, caplog: LogCaptureFixture) -> None:
    assert len(SCALE_OUT_TEMPLATES) == 4
    assert_hidden(secret.password, texts_while(caplog, lambda: _texts_of_a_use(secret.url)))


@pytest.mark.parametrize(("url", "message"), [
    ("redis+sentinel://:S3cret@127.0.0.1:26379", "name the service"),
    ("redis+sentinel://:S3cret@127.0.0.1:26379/svc/zero", "database 'zero' is not a number"),
    ("redis+sentinel://:S3cret@127.0.0.1:26379/svc/1/2", "name the service"),
    ("redis+cluster://:S3cret@127.0.0.1:7000/1", "only database 0"),
    ("redis+cluster://:S3cret@127.0.0.1:70000", "port '70000'"),
    ("redis+cluster://:S3cret@127.0.0.1:7000,,127.0.0.1:7001", "every node needs a host"),
    ("redis+cluster://:S3cret@[::1]x", "bad node"),
    ("redis+cluster://:S3cret@127.0.0.1:7000?socket_timeout=soon", "Invalid value"),
    ("redis+cluster://:S3cret@127.0.0.1:7000?prefix={tag}", "must not contain braces"),
    ("redis+cluster://:S3cret@127.0.0.1:7000?wait_replicas=one", "wait_replicas must be a whole number"),
    ("redis+sentinel://:S3cret@127.0.0.1/svc?wait_timeout=-5", "wait_timeout must be a whole number"),
    ("redis://:S3cret@127.0.0.1?wait_timeout=0", "wait_timeout must be a positive"),
    ("redis+sentinel://:S3cret@127.0.0.1/svc?wait_timeout=" + "9" * 5000, "wait_timeout must be a whole number"),
    ("redis://:S3cret@127.0.0.1?wait_replicas=" + "1" * 10, "wait_replicas must be a whole number, at most"),
])
def test_malformed_cluster_and_sentinel_urls_get_a_clear_error(url: str, message: str) -> None:
    with pytest.raises(StoreConfigError, match=message) as raised:
        store_from_url(url)
    assert "S3cret" not in str(raised.value)


def test_every_redis_scheme_serves_the_lock_store() -> None:
    from mutexcron import plugins

    table = plugins.schemes("lock_store")
    assert {"redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"} <= set(table)


# -- the cluster --------------------------------------------------------------------------------------------


def test_seed_and_locks_cover_every_master_of_the_cluster(
    cluster_url: str, stores: Callable[[str], RedisLockStore],
) -> None:
    store = stores(cluster_url)
    names = [f"job.{n}" for n in range(30)]
    assert store.seed(names) == 30 and store.seed(names) == 0
    client = cluster_client()
    try:
        masters = {client.get_node_from_key(store.key(name)).name for name in names}
    finally:
        client.close()
    assert len(masters) == 3, "the jobs' hashes spread over the three masters"
    assert [state.name for state in store.locks()] == sorted(names)


def test_a_store_built_on_a_cluster_client_seeds_it(cluster_server_url: str, cluster_url: str) -> None:
    """The issue's first symptom: seed() on RedisLockStore(RedisCluster(...)) raised 'evalsha is blocked'."""
    prefix = cluster_url.partition("?prefix=")[2]
    store = RedisLockStore(RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", 7000)]), prefix=prefix)
    try:
        assert store.seed(["a", "b", "c"]) == 3
        assert store.acquire("b", owner="x", lease=LEASE, fire_time=FIRE).token == 1
        assert [s.name for s in store.locks()] == ["a", "b", "c"]
    finally:
        store.close()


def _misroute(store: RedisLockStore, name: str, *, to_replica: bool = False) -> None:
    """Point the store's map of slots at another master for ``name``'s lock, as a map read before a resharding
    would be (``to_replica``: at its master's replica, as a map read before a failover would be)."""
    client = store.client
    assert isinstance(client, RedisCluster)
    slot = client.keyslot(store.key(name))
    master, *replicas = client.nodes_manager.slots_cache[slot]
    wrong = replicas[0] if to_replica else next(node for node in client.get_primaries() if node.name != master.name)
    client.nodes_manager.slots_cache[slot] = [wrong]


@pytest.fixture
def twelve(cluster_url: str, stores: Callable[[str], RedisLockStore]) -> tuple[RedisLockStore, list[str]]:
    """A cluster store with twelve locks seeded, over the three masters."""
    store = stores(cluster_url)
    names = [f"job.{n}" for n in range(12)]
    store.seed(names)
    return store, names


def test_a_batch_acquire_on_a_stale_slot_map_takes_each_lock_once_where_it_lives(
    twelve: tuple[RedisLockStore, list[str]],
) -> None:
    store, names = twelve
    _misroute(store, names[0])
    won = store.acquire_many([AcquireRequest(name, "a", LEASE, FIRE, None) for name in names])
    assert [(answer.status, answer.token) for answer in won] == [(AcquireStatus.ACQUIRED, 1)] * 12  # type: ignore[union-attr]
    again = store.acquire_many([AcquireRequest(name, "b", LEASE, FIRE, None) for name in names])
    assert {answer.status for answer in again} == {AcquireStatus.ALREADY_RAN}  # type: ignore[union-attr]


def test_a_batch_acquire_sent_to_a_replica_takes_the_lock_on_its_master(
    twelve: tuple[RedisLockStore, list[str]],
) -> None:
    store, names = twelve
    _misroute(store, names[0], to_replica=True)
    won = store.acquire_many([AcquireRequest(name, "a", LEASE, FIRE, None) for name in names])
    assert [(answer.status, answer.token) for answer in won] == [(AcquireStatus.ACQUIRED, 1)] * 12  # type: ignore[union-attr]


def test_a_batch_release_on_a_stale_slot_map_releases_each_lock(twelve: tuple[RedisLockStore, list[str]]) -> None:
    store, names = twelve
    store.acquire_many([AcquireRequest(name, "a", LEASE, FIRE, None) for name in names])
    _misroute(store, names[0])
    assert store.release_many([ReleaseRequest(name, 1) for name in names]) == [True] * 12
    assert [state.locked for state in store.locks()] == [False] * 12


def test_locks_on_a_stale_slot_map_reads_each_lock_where_it_lives(twelve: tuple[RedisLockStore, list[str]]) -> None:
    store, names = twelve
    store.acquire(names[0], owner="a", lease=LEASE, fire_time=FIRE)
    _misroute(store, names[0])
    states = store.locks()
    assert [state.name for state in states] == sorted(names)
    assert [state.name for state in states if state.locked] == [names[0]]


# -- wait_replicas -------------------------------------------------------------------------------------------


def test_wait_replicas_defaults(redis_url: str, stores: Callable[[str], RedisLockStore]) -> None:
    store = stores(redis_url)
    assert (store.wait_replicas, store.wait_timeout) == (0, DEFAULT_WAIT_TIMEOUT) == (0, timedelta(milliseconds=200))
    store = stores(f"{redis_url}&wait_replicas=2&wait_timeout=50")
    assert (store.wait_replicas, store.wait_timeout) == (2, timedelta(milliseconds=50))


def test_an_acquire_that_too_few_replicas_confirm_does_not_count(
    scale_out_url: str, stores: Callable[[str], RedisLockStore],
) -> None:
    """Each master of the shared topologies has one replica: asking for two fails closed, after the timeout."""
    store = stores(f"{scale_out_url}&wait_replicas=2&wait_timeout=50")
    store.seed(["job"])
    with pytest.raises(ReplicationUnconfirmed, match=r"reached 1 of 2 replicas within 50 ms") as raised:
        store.acquire("job", owner="a", lease=LEASE, fire_time=FIRE)
    assert isinstance(raised.value, StoreUnavailable)
    state = store.lock("job")
    assert state is not None and not state.locked and state.token == 1  # released at once, not left to its lease
    assert state.last_fire_time == FIRE  # the tick is taken: no other instance runs it either
    again = store.acquire("job", owner="b", lease=LEASE, fire_time=FIRE)
    assert again.status.value == "already_ran"  # a refusal writes nothing: it is not waited for


def test_a_refused_acquire_is_not_refused_for_want_of_replicas(
    redis_url: str, stores: Callable[[str], RedisLockStore],
) -> None:
    """The lone test server has no replica: an acquire it would grant fails closed, one it refuses says why."""
    store = stores(f"{redis_url}&wait_replicas=1&wait_timeout=20")
    plain = stores(redis_url)
    plain.acquire("job", owner="holder", lease=LEASE, fire_time=FIRE)
    busy = store.acquire("job", owner="a", lease=LEASE, fire_time=FIRE + timedelta(seconds=1))
    assert busy.status.value == "busy" and busy.holder == "holder"
    with pytest.raises(ReplicationUnconfirmed, match="reached 0 of 1"):
        store.acquire("other", owner="a", lease=LEASE, fire_time=FIRE)


def test_a_run_whose_lock_is_unconfirmed_is_skipped_as_a_store_error(
    scale_out_url: str, registry: Registry, new_scheduler: Callable[..., Scheduler],
) -> None:
    ran: list[int] = []
    mutex_cron("0 0 1 1 *", name="guarded", registry=registry)(lambda: ran.append(1))
    scheduler = new_scheduler(f"{scale_out_url}&wait_replicas=2&wait_timeout=20")
    record = scheduler.run_now("guarded")
    assert record.outcome is Outcome.SKIPPED_STORE_ERROR and ran == []
    assert "reached 1 of 2 replicas" in (record.error or "")
    confirmed = new_scheduler(f"{scale_out_url}&wait_replicas=1", instance_id="B")
    assert confirmed.run_now("guarded").outcome is Outcome.SUCCEEDED and ran == [1]


def test_wait_replicas_confirms_on_the_master_of_each_key(
    cluster_url: str, stores: Callable[[str], RedisLockStore],
) -> None:
    store = stores(f"{cluster_url}&wait_replicas=1&wait_timeout=2000")
    names = [f"job.{n}" for n in range(12)]
    tokens = [store.acquire(name, owner="a", lease=LEASE, fire_time=FIRE).token for name in names]
    assert tokens == [1] * 12
    client = cluster_client()
    try:
        replicas = {node.name: node for node in client.get_replicas()}
        for name in names:  # every replica of each key's master has the lock already
            master = client.get_node_from_key(store.key(name))
            for replica in replicas.values():
                reader = redis.Redis(host=replica.host, port=replica.port, decode_responses=True)
                try:
                    reader.execute_command("READONLY")
                    if reader.execute_command("ROLE")[1:3] == [master.host, master.port]:
                        assert reader.hget(store.key(name), "locked") == "1"
                finally:
                    reader.close()
    finally:
        client.close()

"""MongoLockStore against a real MongoDB wire server: URLs, seeding, and lock semantics on the server's clock."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import pymongo
import pytest
from pymongo.errors import BulkWriteError
from pymongo.write_concern import WriteConcern

from mutexcron.errors import StoreConfigError, StoreUnavailable
from mutexcron.stores import store_from_url
from mutexcron.stores.base import AcquireStatus, LockState
from mutexcron.stores.mongo import MongoLockStore
from tests.support import wait_until

LONG = timedelta(seconds=60)
FIRE = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
PASSWORD = "s3cret"
DEAD_URL = f"mongodb://user:{PASSWORD}@127.0.0.1:1/deaddb?serverSelectionTimeoutMS=300"


def with_query(url: str, **options: str) -> str:
    parts = urlsplit(url)
    extra = urlencode(options)
    return urlunsplit(parts._replace(query=f"{parts.query}&{extra}" if parts.query else extra))


def held(store: MongoLockStore, name: str) -> LockState:
    state = store.lock(name)
    assert state is not None
    return state


@pytest.fixture
def store(mongo_url: str) -> Iterator[MongoLockStore]:
    store = MongoLockStore.from_url(mongo_url)
    yield store
    store.close()


@pytest.fixture
def raw(mongo_server_url: str) -> Iterator[pymongo.MongoClient[dict[str, Any]]]:
    """A plain pymongo client (naive datetimes, default options) for looking behind the store's back."""
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(mongo_server_url, serverSelectionTimeoutMS=5000)
    yield client
    client.close()


# --- URLs and client options -------------------------------------------------------------------------------


def test_url_database_and_collection_option_are_honoured(
    mongo_url: str, mongo_database: str, raw: pymongo.MongoClient[dict[str, Any]]
) -> None:
    with MongoLockStore.from_url(with_query(mongo_url, collection="team_locks")) as store:
        assert (store.collection.database.name, store.collection.name) == (mongo_database, "team_locks")
        store.seed(["job"])
    assert raw[mongo_database]["team_locks"].find_one({"_id": "job"}) is not None


def test_url_without_database_or_collection_uses_default_names(mongo_server_url: str) -> None:
    with MongoLockStore.from_url(mongo_server_url) as store:
        assert (store.collection.database.name, store.collection.name) == ("mutexcron", "mutexcron_locks")


def test_collection_option_is_not_passed_on_to_pymongo(mongo_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pymongo warns about options it does not know
        MongoLockStore.from_url(with_query(mongo_url, collection="locks")).close()


def test_other_url_options_reach_pymongo_verbatim(mongo_server_url: str) -> None:
    url = mongo_server_url + "&readPreference=secondaryPreferred&readPreferenceTags=dc:ny,rack:1&collection=c"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = MongoLockStore.from_url(url)
    with store:
        assert store.collection.database.client.options.read_preference.tag_sets == [{"dc": "ny", "rack": "1"}]


def test_replica_set_seed_list_url_is_accepted() -> None:
    store = MongoLockStore.from_url("mongodb://h1:27017,h2:27018/db?replicaSet=rs0&serverSelectionTimeoutMS=300")
    try:
        assert store.collection.database.name == "db"
    finally:
        store.close()


def test_default_client_options(mongo_url: str) -> None:
    with MongoLockStore.from_url(mongo_url) as store:
        options = store.collection.database.client.options
        assert options.server_selection_timeout == 3.0
        assert options.pool_options.connect_timeout == 2.0
        assert options.pool_options.socket_timeout == 5.0
        assert options.codec_options.tz_aware is True


def test_timeouts_in_the_url_override_the_defaults(mongo_url: str) -> None:
    url = with_query(mongo_url, serverSelectionTimeoutMS="300", socketTimeoutMS="700")
    with MongoLockStore.from_url(url) as store:
        options = store.collection.database.client.options
        assert options.server_selection_timeout == 0.3
        assert options.pool_options.socket_timeout == 0.7


def test_client_options_passed_to_from_url_win(mongo_url: str) -> None:
    with MongoLockStore.from_url(mongo_url, serverSelectionTimeoutMS=1234) as store:
        assert store.collection.database.client.options.server_selection_timeout == 1.234


def test_store_from_url_builds_a_mongo_store(mongo_url: str) -> None:
    store = store_from_url(mongo_url)
    try:
        assert isinstance(store, MongoLockStore)
    finally:
        store.close()


def test_repr_shows_masked_url_and_collection() -> None:
    store = MongoLockStore.from_url(f"mongodb://user:{PASSWORD}@127.0.0.1:1/db?collection=team_locks")
    try:
        text = repr(store)
        assert PASSWORD not in text
        assert "mongodb://***@127.0.0.1:1/db" in text
        assert "collection='team_locks'" in text
    finally:
        store.close()


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(f"mongodb://user:{PASSWORD}@127.0.0.1:notaport/db", id="port-not-a-number"),
        pytest.param(f"mongodb://user:{PASSWORD}@127.0.0.1:99999/db", id="port-out-of-range"),
        pytest.param(f"mongodb://user:{PASSWORD}@h1:27017,h2:x/db", id="bad-port-in-host-list"),
        pytest.param(f"mongodb://user:{PASSWORD}@[::1/db", id="unparseable"),
        pytest.param(f"mongodb://user:{PASSWORD}@/db", id="empty-host"),
        pytest.param(f"mongodb://user:{PASSWORD}@127.0.0.1/db?tls=true&ssl=false", id="invalid-uri"),
        pytest.param(f"mongodb://user:{PASSWORD}@127.0.0.1/db?authMechanism=MONGODB-X509", id="configuration"),
        pytest.param(f"mongodb://user:{PASSWORD}@127.0.0.1/bad%20db", id="bad-database-name"),
        pytest.param(f"mongodb://user:{PASSWORD}@127.0.0.1/db.locks", id="dotted-database-name"),
        pytest.param(f"mongodb://user:{PASSWORD}@127.0.0.1/db?collection=", id="empty-collection"),
        pytest.param(f"mongodb://user:{PASSWORD}@127.0.0.1/db?collection=$locks", id="bad-collection-name"),
    ],
)
def test_malformed_url_raises_config_error_without_the_password(url: str) -> None:
    with pytest.raises(StoreConfigError) as caught:
        MongoLockStore.from_url(url)
    assert PASSWORD not in str(caught.value)


def test_config_error_names_the_masked_url() -> None:
    with pytest.raises(StoreConfigError, match=r"mongodb://\*\*\*@127\.0\.0\.1:99999/db"):
        MongoLockStore.from_url(f"mongodb://user:{PASSWORD}@127.0.0.1:99999/db")


# --- the collection and its documents ------------------------------------------------------------------------


def test_writes_use_majority_write_concern(store: MongoLockStore) -> None:
    assert store.collection.write_concern == WriteConcern("majority")


def test_given_collection_is_switched_to_majority_write_concern(
    raw: pymongo.MongoClient[dict[str, Any]], mongo_database: str
) -> None:
    collection = raw[mongo_database].get_collection("locks", write_concern=WriteConcern(w=1))
    assert MongoLockStore(collection).collection.write_concern == WriteConcern("majority")


def test_datetimes_are_aware_utc_even_from_a_naive_client(
    raw: pymongo.MongoClient[dict[str, Any]], mongo_database: str
) -> None:
    store = MongoLockStore(raw[mongo_database]["locks"])
    store.acquire("job", owner="a", lease=LONG, fire_time=FIRE)
    state = held(store, "job")
    for value in (state.last_locked_at, state.lock_until, state.last_fire_time, store.now()):
        assert value is not None and value.tzinfo is UTC


def test_close_leaves_a_callers_client_open(raw: pymongo.MongoClient[dict[str, Any]], mongo_database: str) -> None:
    MongoLockStore(raw[mongo_database]["locks"]).close()
    assert raw.admin.command("ping")["ok"] == 1


def test_close_closes_the_client_from_the_url(mongo_url: str) -> None:
    store = MongoLockStore.from_url(mongo_url)
    store.ping()
    store.close()
    with pytest.raises(StoreUnavailable):
        store.ping()


def test_seed_creates_a_fresh_document_per_new_name(
    store: MongoLockStore, raw: pymongo.MongoClient[dict[str, Any]], mongo_database: str
) -> None:
    before = store.now()
    assert store.seed(["a", "b", "a"]) == 2
    document = raw[mongo_database]["mutexcron_locks"].find_one({"_id": "a"})
    assert document is not None
    created_at = document.pop("created_at")  # the server's clock, as the raw client reads it (naive UTC)
    assert abs(created_at.replace(tzinfo=UTC) - before) < timedelta(seconds=5)
    assert document == {
        "_id": "a",
        "name": "a",
        "locked": False,
        "locked_by": None,
        "last_locked_at": None,
        "last_released_at": None,
        "lock_until": None,
        "last_fire_time": None,
        "token": 0,
    }


def test_seed_counts_only_documents_it_created(store: MongoLockStore) -> None:
    store.seed(["a", "b"])
    assert store.seed(["a", "b", "c"]) == 1
    assert store.seed([]) == 0


def test_seed_never_resets_an_acquired_lock(store: MongoLockStore) -> None:
    store.seed(["job"])
    token = store.acquire("job", owner="a", lease=LONG, fire_time=FIRE).token
    before = held(store, "job")
    assert store.seed(["job"]) == 0
    assert held(store, "job") == before
    assert before.token == token and before.locked


def test_concurrent_seeding_creates_exactly_one_document_per_name(
    mongo_url: str, raw: pymongo.MongoClient[dict[str, Any]], mongo_database: str
) -> None:
    names = [f"job-{i}" for i in range(20)]
    stores = [MongoLockStore.from_url(mongo_url) for _ in range(8)]
    for each in stores:
        each.ping()  # connect first so the threads race on the writes
    barrier = threading.Barrier(len(stores))
    created: list[int] = []
    errors: list[BaseException] = []

    def seed(each: MongoLockStore) -> None:
        barrier.wait()
        try:
            created.append(each.seed(names))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=seed, args=(each,)) for each in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for each in stores:
        each.close()
    assert errors == []
    assert sum(created) == len(names)
    assert raw[mongo_database]["mutexcron_locks"].count_documents({}) == len(names)


def test_seed_treats_a_duplicate_key_race_as_already_there(
    store: MongoLockStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def racing_bulk_write(*args: Any, **kwargs: Any) -> None:
        raise BulkWriteError(
            {
                "writeErrors": [{"index": 1, "code": 11000, "errmsg": "E11000 duplicate key error"}],
                "writeConcernErrors": [],
                "nUpserted": 1,
            }
        )

    monkeypatch.setattr(store.collection, "bulk_write", racing_bulk_write)
    assert store.seed(["a", "b"]) == 1


def test_seed_reports_other_write_errors_as_unavailable(store: MongoLockStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_bulk_write(*args: Any, **kwargs: Any) -> None:
        raise BulkWriteError(
            {
                "writeErrors": [
                    {"index": 0, "code": 11000, "errmsg": "E11000"},
                    {"index": 1, "code": 2, "errmsg": "x"},
                ],
                "writeConcernErrors": [],
                "nUpserted": 0,
            }
        )

    monkeypatch.setattr(store.collection, "bulk_write", failing_bulk_write)
    with pytest.raises(StoreUnavailable):
        store.seed(["a", "b"])


@pytest.mark.parametrize(
    "name",
    ["ünïcødé ☃ 日本語", "app.jobs.nightly", "make_job.<locals>.job", "x" * 200, "$dollar", "{braces} [x] *"],
)
def test_hostile_job_names_round_trip(store: MongoLockStore, name: str) -> None:
    assert store.seed([name]) == 1
    acquisition = store.acquire(name, owner="a", lease=LONG, fire_time=FIRE)
    assert acquisition.acquired
    assert held(store, name).name == name
    assert [state.name for state in store.locks()] == [name]
    assert store.release(name, token=acquisition.token or 0)
    assert store.delete(name)


def test_locks_are_sorted_by_name(store: MongoLockStore) -> None:
    store.seed(["charlie", "alpha", "Bravo", "éclair"])
    assert [state.name for state in store.locks()] == ["Bravo", "alpha", "charlie", "éclair"]


def test_delete_removes_the_document(store: MongoLockStore) -> None:
    store.seed(["job"])
    assert store.delete("job")
    assert store.lock("job") is None
    assert not store.delete("job")


# --- acquire, renew, release on the server's clock ----------------------------------------------------------


def test_now_is_the_servers_clock_in_aware_utc(store: MongoLockStore) -> None:
    first = store.now()
    assert first.tzinfo is UTC
    assert store.now() >= first


def test_acquire_takes_the_lease_from_the_servers_clock(store: MongoLockStore) -> None:
    before = store.now()
    acquisition = store.acquire("job", owner="a", lease=timedelta(seconds=30), fire_time=FIRE)
    after = store.now()
    state = held(store, "job")
    assert acquisition.status is AcquireStatus.ACQUIRED and acquisition.token == 1
    assert state.locked and state.locked_by == "a" and state.token == 1
    assert state.last_locked_at is not None and before <= state.last_locked_at <= after
    assert state.lock_until == state.last_locked_at + timedelta(seconds=30)
    assert state.last_fire_time == FIRE


def test_acquire_creates_the_document_of_an_unseeded_job(store: MongoLockStore) -> None:
    assert store.acquire("job", owner="a", lease=LONG, fire_time=FIRE).acquired
    assert held(store, "job").token == 1


def test_acquire_treats_a_missing_last_fire_time_field_as_never_fired(
    store: MongoLockStore, raw: pymongo.MongoClient[dict[str, Any]], mongo_database: str
) -> None:
    raw[mongo_database]["mutexcron_locks"].insert_one({"_id": "job", "name": "job", "locked": False, "token": 0})
    assert store.acquire("job", owner="a", lease=LONG, fire_time=FIRE).acquired


def test_owner_is_stored_literally_even_if_it_looks_like_a_field_path(store: MongoLockStore) -> None:
    store.acquire("job", owner="$token", lease=LONG, fire_time=None)
    assert held(store, "job").locked_by == "$token"


def test_a_held_lock_is_busy_for_a_newer_fire(store: MongoLockStore) -> None:
    store.acquire("job", owner="a", lease=LONG, fire_time=FIRE)
    later = store.acquire("job", owner="b", lease=LONG, fire_time=FIRE + timedelta(minutes=1))
    assert (later.status, later.holder, later.token) == (AcquireStatus.BUSY, "a", None)


def test_already_ran_takes_precedence_over_busy(store: MongoLockStore) -> None:
    store.acquire("job", owner="a", lease=LONG, fire_time=FIRE)
    for fire_time in (FIRE, FIRE - timedelta(minutes=1)):
        again = store.acquire("job", owner="b", lease=LONG, fire_time=fire_time)
        assert (again.status, again.holder) == (AcquireStatus.ALREADY_RAN, "a")


def test_a_fire_time_runs_once_even_after_release(store: MongoLockStore) -> None:
    first = store.acquire("job", owner="a", lease=LONG, fire_time=FIRE)
    store.release("job", token=first.token or 0)
    assert store.acquire("job", owner="b", lease=LONG, fire_time=FIRE).status is AcquireStatus.ALREADY_RAN
    following = store.acquire("job", owner="b", lease=LONG, fire_time=FIRE + timedelta(minutes=1))
    assert following.acquired and following.token == 2
    assert held(store, "job").last_fire_time == FIRE + timedelta(minutes=1)


def test_manual_run_neither_checks_nor_moves_the_last_fire_time(store: MongoLockStore) -> None:
    first = store.acquire("job", owner="a", lease=LONG, fire_time=FIRE)
    store.release("job", token=first.token or 0)
    assert store.acquire("job", owner="b", lease=LONG, fire_time=None).acquired
    assert held(store, "job").last_fire_time == FIRE


def test_manual_run_is_busy_while_held(store: MongoLockStore) -> None:
    store.acquire("job", owner="a", lease=LONG, fire_time=FIRE)
    manual = store.acquire("job", owner="b", lease=LONG, fire_time=None)
    assert (manual.status, manual.holder) == (AcquireStatus.BUSY, "a")


def test_fire_times_compare_at_millisecond_precision(store: MongoLockStore) -> None:
    fire_time = FIRE + timedelta(microseconds=123_456)
    first = store.acquire("job", owner="a", lease=LONG, fire_time=fire_time)
    assert held(store, "job").last_fire_time == FIRE + timedelta(milliseconds=123)
    store.release("job", token=first.token or 0)
    assert store.acquire("job", owner="b", lease=LONG, fire_time=fire_time).status is AcquireStatus.ALREADY_RAN


def test_naive_fire_time_is_rejected(store: MongoLockStore) -> None:
    with pytest.raises(ValueError, match="naive"):
        store.acquire("job", owner="a", lease=LONG, fire_time=datetime(2025, 3, 1, 12, 0))


def test_an_expired_lease_can_be_taken_over(store: MongoLockStore) -> None:
    store.acquire("job", owner="a", lease=timedelta(milliseconds=300), fire_time=None)
    assert store.acquire("job", owner="b", lease=LONG, fire_time=None).status is AcquireStatus.BUSY
    expired_at = held(store, "job").lock_until
    taken = wait_until(lambda: store.acquire("job", owner="b", lease=LONG, fire_time=None).acquired, timeout=10)
    assert taken
    state = held(store, "job")
    assert state.locked_by == "b" and state.token == 2
    assert expired_at is not None and state.last_locked_at is not None and state.last_locked_at >= expired_at


def test_renew_extends_the_lease_from_the_servers_now(store: MongoLockStore) -> None:
    token = store.acquire("job", owner="a", lease=timedelta(seconds=1), fire_time=None).token or 0
    before = store.now()
    assert store.renew("job", token=token, lease=LONG)
    after = store.now()
    lock_until = held(store, "job").lock_until
    assert lock_until is not None and before + LONG <= lock_until <= after + LONG


def test_release_frees_the_lock_at_the_servers_now(store: MongoLockStore) -> None:
    token = store.acquire("job", owner="a", lease=LONG, fire_time=None).token or 0
    assert store.release("job", token=token)
    state = held(store, "job")
    assert not state.locked
    assert state.last_released_at is not None and state.lock_until == state.last_released_at
    assert store.acquire("job", owner="b", lease=LONG, fire_time=None).acquired


def test_stale_token_cannot_release_or_renew(store: MongoLockStore) -> None:
    stale = store.acquire("job", owner="a", lease=LONG, fire_time=None).token or 0
    store.force_unlock("job")
    assert not store.renew("job", token=stale, lease=LONG)  # not locked at all
    current = store.acquire("job", owner="b", lease=LONG, fire_time=None).token
    before = held(store, "job")
    assert not store.release("job", token=stale)
    assert not store.renew("job", token=stale, lease=timedelta(hours=1))
    assert held(store, "job") == before
    assert before.locked_by == "b" and before.token == current == stale + 1


def test_release_of_an_unknown_job_is_false(store: MongoLockStore) -> None:
    assert not store.release("nothing", token=1)
    assert not store.renew("nothing", token=1, lease=LONG)


def test_hold_at_least_keeps_the_lock_until_start_plus_hold(store: MongoLockStore) -> None:
    hold = timedelta(milliseconds=500)
    token = store.acquire("job", owner="a", lease=LONG, fire_time=None).token or 0
    assert store.release("job", token=token, hold_at_least=hold)
    state = held(store, "job")
    assert state.locked and state.last_locked_at is not None and state.last_released_at is not None
    assert state.lock_until == state.last_locked_at + hold
    assert store.acquire("job", owner="b", lease=LONG, fire_time=None).status is AcquireStatus.BUSY
    wait_until(lambda: store.acquire("job", owner="b", lease=LONG, fire_time=None).acquired, timeout=10)
    taken_at = held(store, "job").last_locked_at
    assert taken_at is not None and taken_at >= state.last_locked_at + hold


def test_hold_at_least_already_served_releases_fully(store: MongoLockStore) -> None:
    hold = timedelta(milliseconds=200)
    token = store.acquire("job", owner="a", lease=LONG, fire_time=None).token or 0
    started = held(store, "job").last_locked_at
    assert started is not None
    wait_until(lambda: store.now() >= started + hold, timeout=10)
    assert store.release("job", token=token, hold_at_least=hold)
    state = held(store, "job")
    assert not state.locked and state.lock_until == state.last_released_at


def test_force_unlock_frees_a_held_lock(store: MongoLockStore) -> None:
    store.acquire("job", owner="a", lease=LONG, fire_time=None)
    assert store.force_unlock("job")
    state = held(store, "job")
    assert not state.locked and state.lock_until == state.last_released_at
    assert not store.force_unlock("job")
    assert not store.force_unlock("nothing")


# --- an unreachable server ---------------------------------------------------------------------------------


OPERATIONS: dict[str, Callable[[MongoLockStore], object]] = {
    "now": lambda store: store.now(),
    "ping": lambda store: store.ping(),
    "seed": lambda store: store.seed(["job"]),
    "acquire": lambda store: store.acquire("job", owner="a", lease=LONG, fire_time=FIRE),
    "renew": lambda store: store.renew("job", token=1, lease=LONG),
    "release": lambda store: store.release("job", token=1),
    "force_unlock": lambda store: store.force_unlock("job"),
    "delete": lambda store: store.delete("job"),
    "lock": lambda store: store.lock("job"),
    "locks": lambda store: store.locks(),
    "pause": lambda store: store.pause("job"),
    "resume": lambda store: store.resume("job"),
    "set_schedule": lambda store: store.set_schedule("job", "* * * * *"),
}


@pytest.mark.parametrize("operation", OPERATIONS.values(), ids=OPERATIONS.keys())
def test_unreachable_server_raises_store_unavailable(operation: Callable[[MongoLockStore], object]) -> None:
    with MongoLockStore.from_url(DEAD_URL) as store, pytest.raises(StoreUnavailable) as caught:
        operation(store)
    message = str(caught.value)
    assert "mongodb://***@127.0.0.1:1/deaddb" in message
    assert PASSWORD not in message

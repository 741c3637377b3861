"""The SQL lock store passes the store contract and the overlap contract on SQLite, PostgreSQL and MariaDB, and
their verbs with the database session in other time zones (the scenarios that run schedulers on the store are the
same code over any zone: they run once per database)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connections

from mutexcron.stores import AcquireRequest, AcquireStatus, store_from_url
from mutexcron_django.models import Lock
from mutexcron_django.sql.store import DjangoLockStore
from tests.contract import FIRE_1, FIRE_2, ControlSchedulerContract, StoreContract, VerbsSampleContract
from tests.django.databases import on_database
from tests.django.session_zone import InSessionZone, session_time_zone, set_session_zone


class DjangoStoreVerbs(InSessionZone, StoreContract):
    """The store's own operations on ``alias``, its connections in ``session_zone``."""

    alias = "default"

    @pytest.fixture(autouse=True)
    def _store(self) -> Iterator[None]:
        self.store = DjangoLockStore(self.alias)
        yield
        connections.close_all()

    def thread_finished(self) -> None:
        connections.close_all()  # Django connections are per thread; close the thread's own


class DjangoStoreContract(DjangoStoreVerbs, VerbsSampleContract, ControlSchedulerContract):
    """The whole contract on ``alias``: the store's own operations, a sample of the verbs and the scenarios that
    run schedulers on it."""


@on_database("default")
class TestSQLiteLockStore(DjangoStoreContract):
    alias = "default"


@on_database("postgres")
class TestPostgreSQLLockStore(DjangoStoreContract):
    alias = "postgres"


@on_database("mariadb")
class TestMariaDBLockStore(DjangoStoreContract):
    alias = "mariadb"


@on_database("mariadb")
class TestMariaDBLockStoreFiveHoursWestOfUTC(DjangoStoreVerbs):
    alias = "mariadb"
    session_zone = "-05:00"


@on_database("mariadb")
class TestMariaDBLockStoreTwoHoursEastOfUTC(DjangoStoreVerbs):
    alias = "mariadb"
    session_zone = "+02:00"


@on_database("postgres")
class TestPostgreSQLLockStoreInKathmandu(DjangoStoreVerbs):
    alias = "postgres"
    session_zone = "Asia/Kathmandu"  # +05:45


# A server whose zone follows daylight saving time, on the spring-forward night: the session's zone moves
# an hour east between two statements (PostgreSQL: two named zones an hour apart all year).
DST_NIGHT = [pytest.param(alias, before, after, marks=on_database(alias), id=alias)
             for alias, before, after in (("mariadb", "+01:00", "+02:00"),
                                          ("postgres", "Europe/Berlin", "Europe/Athens"))]


@pytest.mark.parametrize(("alias", "before", "after"), DST_NIGHT)
def test_a_session_zone_change_mid_lease_gives_no_second_holder(alias: str, before: str, after: str) -> None:
    store = DjangoLockStore(alias)
    lease = timedelta(minutes=10)
    with session_time_zone(alias, before):
        held = store.acquire("job", owner="A", lease=lease, fire_time=FIRE_1)
        assert held.token is not None
        set_session_zone(connections[alias], after)
        assert store.acquire("job", owner="B", lease=lease, fire_time=FIRE_2).status is AcquireStatus.BUSY
        assert store.renew("job", token=held.token, lease=lease)


def test_django_url_picks_the_database_alias() -> None:
    store = store_from_url("django://postgres")
    assert isinstance(store, DjangoLockStore) and store.using == "postgres"


@on_database("postgres")
def test_a_lease_of_days_lasts_exactly_that_long_across_daylight_saving_time() -> None:
    """PostgreSQL adds an interval's days in the session's zone: across a DST change a day is 23 or 25 hours."""
    store = DjangoLockStore("postgres")
    # New York's DST changes are 127 and 238 days apart: one of these leases ends past exactly one of them.
    leases = {f"job.{days}": timedelta(days=days) for days in range(30, 366, 30)}
    with session_time_zone("postgres", "America/New_York"):
        for name, lease in leases.items():
            assert store.acquire(name, owner="A", lease=lease, fire_time=None).acquired
        ends = {s.name: s.lock_until for s in store.locks()}
    now = datetime.now(UTC)
    for name, lease in leases.items():
        assert ends[name] is not None and abs(ends[name] - (now + lease)) < timedelta(seconds=5), name


@pytest.mark.parametrize("alias", [pytest.param(alias, marks=on_database(alias))
                                   for alias in ("default", "postgres", "mariadb")])
def test_a_row_inserted_with_its_name_and_token_alone_reads_as_never_run_and_works(alias: str) -> None:
    """A row whose nullable columns are NULL (a row inserted by hand) reads them as None and works."""
    Lock.objects.using(alias).create(name="job", token=3)
    store = DjangoLockStore(alias)
    state = store.lock("job")
    assert state is not None and state.created_at is None and state.last_outcome is None and state.incident is None
    assert store.seed(["job"]) == 0 and store.lock("job") == state
    token = store.acquire("job", owner="a", lease=timedelta(seconds=30), fire_time=FIRE_1).token
    assert token == 4 and store.release("job", token=token, outcome="failed", error="ValueError: boom")
    failed = store.lock("job")
    assert failed is not None and failed.last_outcome == "failed" and failed.last_error == "ValueError: boom"
    assert failed.last_success_at is None and failed.created_at is None
    assert store.open_incident("job", "failing since 06:00") and store.close_incident("job", "failing since 06:00")


@pytest.mark.parametrize("alias", [pytest.param(alias, marks=on_database(alias))
                                   for alias in ("default", "postgres", "mariadb")])
def test_a_batch_keeps_each_rows_overlap_slot(alias: str) -> None:
    """acquire_many (one transaction, rows read FOR UPDATE): a live slot refuses other ticks, its own tick wins."""
    store, lease = DjangoLockStore(alias), timedelta(seconds=30)
    for name in ("a", "b"):
        token = store.acquire(name, owner="A", lease=lease, fire_time=FIRE_1).token
        assert token is not None and store.claim_next(name, fire_time=FIRE_2, lease=lease)
        assert store.release(name, token=token)
    later = FIRE_2 + timedelta(minutes=1)
    answers = store.acquire_many([AcquireRequest("a", "B", lease, FIRE_2), AcquireRequest("b", "B", lease, later)])
    assert [getattr(answer, "status", answer) for answer in answers] == [AcquireStatus.ACQUIRED, AcquireStatus.BUSY]
    assert Lock.objects.using(alias).get(name="a").next_fire is None  # the winner emptied its slot


@pytest.mark.django_db(databases="__all__")  # makemigrations checks each database's migration history
def test_the_models_have_all_their_migrations() -> None:
    """makemigrations finds nothing to write: the one migration makes every column of every model."""
    call_command("makemigrations", "mutexcron", check=True, dry_run=True, verbosity=0)

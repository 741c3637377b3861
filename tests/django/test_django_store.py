"""The SQL lock store passes the store contract on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections

from mutexcron.stores import store_from_url
from mutexcron_django.store import DjangoLockStore
from tests.contract import LockStoreContract


class DjangoStoreContract(LockStoreContract):
    alias = "default"

    @pytest.fixture(autouse=True)
    def _store(self) -> Iterator[None]:
        self.store = DjangoLockStore(self.alias)
        yield
        connections.close_all()

    def thread_finished(self) -> None:
        connections.close_all()  # Django connections are per thread; close the thread's own


@pytest.mark.django_db(transaction=True, databases=["default"])
class TestSQLiteLockStore(DjangoStoreContract):
    alias = "default"


@pytest.mark.django_db(transaction=True, databases=["postgres"])
class TestPostgreSQLLockStore(DjangoStoreContract):
    alias = "postgres"


@pytest.mark.django_db(transaction=True, databases=["mariadb"])
class TestMariaDBLockStore(DjangoStoreContract):
    alias = "mariadb"


def test_django_url_picks_the_database_alias() -> None:
    store = store_from_url("django://postgres")
    assert isinstance(store, DjangoLockStore) and store.using == "postgres"

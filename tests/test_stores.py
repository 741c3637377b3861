"""Every lock store passes the same contract (tests/contract.py), against the real servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mutexcron.stores import MemoryLockStore, store_from_url
from tests.contract import LockStoreContract


class TestMemoryLockStore(LockStoreContract):
    @pytest.fixture(autouse=True)
    def _store(self) -> None:
        self.store = MemoryLockStore()


class TestRedisLockStore(LockStoreContract):
    @pytest.fixture(autouse=True)
    def _store(self, redis_url: str) -> Iterator[None]:
        self.store = store_from_url(redis_url)
        yield
        self.store.close()


class TestMongoLockStore(LockStoreContract):
    @pytest.fixture(autouse=True)
    def _store(self, mongo_url: str) -> Iterator[None]:
        self.store = store_from_url(mongo_url)
        yield
        self.store.close()

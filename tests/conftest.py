"""Fixtures shared by the whole suite: real Redis and MongoDB, one namespace per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pymongo
import pytest
import redis

from mutexcron.registry import Registry
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import LockStore, MemoryLockStore, store_from_url
from tests.support.scale_out import (  # noqa: F401 - the shared Redis Cluster and Sentinel group's fixtures
    cluster_server_url,
    cluster_url,
    scale_out_url,
    sentinel_server_url,
    sentinel_url,
)
from tests.support.servers import MONGO_URL_ENV, REDIS_URL, MongoWireServer


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    client = redis.Redis.from_url(REDIS_URL)
    client.ping()
    client.close()
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_server_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    prefix = unique("mutexcron-test:") + ":"
    yield prefix
    client = redis.Redis.from_url(redis_server_url)
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def redis_url(redis_server_url: str, redis_prefix: str) -> str:
    """A Redis store URL whose keys are this test's alone."""
    return f"{redis_server_url}?prefix={redis_prefix}"


@pytest.fixture
def redis_store(redis_url: str) -> Iterator[LockStore]:
    """A Redis lock store of this test's own (its db and prefix)."""
    store = store_from_url(redis_url)
    yield store
    store.close()


@pytest.fixture(scope="session")
def mongo_server_url() -> Iterator[str]:
    """A real MongoDB from $MUTEXCRON_TEST_MONGO_URL, else a mongoeco wire server process."""
    if os.environ.get(MONGO_URL_ENV):
        yield os.environ[MONGO_URL_ENV]
        return
    server = MongoWireServer()
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def mongo_database(mongo_server_url: str) -> Iterator[str]:
    """A database name of this test's own; dropped afterwards."""
    name = unique("mutexcron_test_")
    yield name
    client = pymongo.MongoClient(mongo_server_url, serverSelectionTimeoutMS=5000)
    client.drop_database(name)
    client.close()


@pytest.fixture
def mongo_url(mongo_server_url: str, mongo_database: str) -> str:
    """A MongoDB store URL whose database is this test's alone."""
    parts = urlsplit(mongo_server_url)
    return urlunsplit(parts._replace(path="/" + mongo_database))


@pytest.fixture
def registry() -> Registry:
    """A registry of this test's own, so declarations never leak between tests."""
    return Registry()


@pytest.fixture(params=["memory", "redis"])
def memory_or_redis(request: pytest.FixtureRequest) -> str | LockStore:
    """An in-process store (one object, for all of the test's schedulers), or Redis under this test's own prefix."""
    if request.param == "memory":
        return MemoryLockStore()
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture
def new_scheduler(registry: Registry) -> Iterator[Callable[..., Scheduler]]:
    """``new_scheduler(store, instance_id="A", **options)``: a Scheduler of ``registry``, shut down after the test."""
    made: list[Scheduler] = []

    def new(store: str | LockStore, instance_id: str = "A", **options: Any) -> Scheduler:
        scheduler = Scheduler(store, registry=registry, instance_id=instance_id, **options)
        made.append(scheduler)
        return scheduler

    yield new
    for scheduler in made:
        scheduler.shutdown()

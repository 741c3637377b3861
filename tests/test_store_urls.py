"""Choosing a store by URL or dotted path: clear errors for bad input, passwords never shown."""

from __future__ import annotations

import pytest

from mutexcron import StoreConfigError
from mutexcron.stores import LockStore, MemoryLockStore, RedisLockStore, store_from_url


def test_memory_url_gives_a_memory_store() -> None:
    assert isinstance(store_from_url("memory://"), MemoryLockStore)


def test_a_store_object_is_used_as_it_is() -> None:
    store = MemoryLockStore()
    assert store_from_url(store) is store


def test_a_dotted_path_builds_that_store_class() -> None:
    assert isinstance(store_from_url("mutexcron.stores.memory.MemoryLockStore"), MemoryLockStore)


def test_redis_url_options_are_honoured(redis_server_url: str) -> None:
    store = store_from_url(f"{redis_server_url}?prefix=myapp:locks:")
    assert isinstance(store, RedisLockStore)
    assert store.prefix == "myapp:locks:"
    assert store.key("digest") == "myapp:locks:{digest}"
    store.close()


def test_redis_password_never_appears_in_repr() -> None:
    store = store_from_url("redis://:hunter2@127.0.0.1:6379/0")
    assert "hunter2" not in repr(store)
    assert "***" in repr(store)


def test_rediss_urls_are_accepted() -> None:
    store = store_from_url("rediss://user:hunter2@127.0.0.1:6380/0")
    assert isinstance(store, RedisLockStore)
    assert "hunter2" not in repr(store)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://host/x", "unknown store scheme 'ftp'"),
        ("redis://:hunter2@127.0.0.1:notaport/0", "malformed store URL"),
        ("redis://127.0.0.1:6379/notadb", "malformed Redis URL"),
        ("redis://127.0.0.1:6379/0?prefix={tag}", "must not contain braces"),
        ("", "store must be a URL"),
        ("just-a-word", "neither a URL"),
        ("no.such.module.Store", "cannot load store class"),
        ("mutexcron.stores.memory.NoSuchStore", "has no 'NoSuchStore'"),
        ("mutexcron.errors.MutexcronError", "not a subclass of mutexcron.stores.LockStore"),
    ],
)
def test_malformed_store_settings_get_a_clear_error(url: str, message: str) -> None:
    with pytest.raises(StoreConfigError, match=message) as error:
        store_from_url(url)
    assert "hunter2" not in str(error.value)


def test_every_store_is_a_lock_store() -> None:
    assert issubclass(RedisLockStore, LockStore)

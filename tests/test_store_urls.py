"""Choosing a store by URL or dotted path: clear errors for bad input, passwords never shown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from mutexcron import StoreConfigError, plugins
from mutexcron.plugins import Kind
from mutexcron.stores import SCHEMES, LockStore, MemoryLockStore, RedisLockStore, store_from_url
from mutexcron.tasks import TaskQueue
from mutexcron.tasks.queue import BACKENDS
from mutexcron.tasks.records.base import SCHEMES as RECORD_SCHEMES
from mutexcron.tasks.records.base import cancel_store_from_url
from tests.support import wait_until
from tests.support.servers import free_port, start_redis_server, stop_process


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


# -- the registry of backends (mutexcron.plugins) --------------------------------------------------------


@pytest.fixture
def registered() -> Iterator[list[tuple[Kind, str]]]:
    """Schemes a test registers, removed afterwards."""
    added: list[tuple[Kind, str]] = []
    yield added
    for kind, scheme in added:
        del plugins.schemes(kind)[scheme]


def test_a_registered_scheme_builds_that_class(registered: list[tuple[Kind, str]]) -> None:
    plugins.register("lock_store", "scratch", "mutexcron.stores.memory.MemoryLockStore")
    registered.append(("lock_store", "scratch"))
    assert isinstance(store_from_url("scratch://"), MemoryLockStore)
    assert "scratch" in SCHEMES and SCHEMES["scratch"] == "mutexcron.stores.memory.MemoryLockStore"


def test_a_registered_scheme_is_only_for_its_kind(registered: list[tuple[Kind, str]]) -> None:
    plugins.register("lock_store", "scratch", "mutexcron.stores.memory.MemoryLockStore")
    registered.append(("lock_store", "scratch"))
    with pytest.raises(StoreConfigError, match="unknown task backend scheme 'scratch'"):
        TaskQueue("scratch://")


def test_an_entry_point_style_path_is_accepted(registered: list[tuple[Kind, str]]) -> None:
    plugins.register("lock_store", "scratch", "mutexcron.stores.memory:MemoryLockStore")
    registered.append(("lock_store", "scratch"))
    assert isinstance(store_from_url("scratch://"), MemoryLockStore)


class NotABackend:
    """What a mistaken registration points at: it builds from a URL, but it is no backend."""

    @classmethod
    def from_url(cls, url: str) -> NotABackend:
        return cls()


@pytest.mark.parametrize(
    ("kind", "build", "what"),
    [("lock_store", store_from_url, "store"), ("task_backend", TaskQueue, "task backend"),
     ("record_store", cancel_store_from_url, "cancel store")],
)
def test_a_registered_class_that_builds_the_wrong_kind_is_refused(registered: list[tuple[Kind, str]], kind: Kind,
                                                                  build: Callable[[str], object], what: str) -> None:
    plugins.register(kind, "scratch", f"{__name__}.NotABackend")
    registered.append((kind, "scratch"))
    with pytest.raises(StoreConfigError, match=f"the {what} class for 'scratch://\\*\\*\\*@h' built a NotABackend"):
        build("scratch://:hunter2@h")


@pytest.mark.parametrize(
    ("kind", "scheme", "path"),
    [("locks", "x", "a.B"), ("lock_store", "Bad Scheme", "a.B"), ("lock_store", "x", "nodots")],
)
def test_register_rejects_what_it_cannot_serve(kind: str, scheme: str, path: str) -> None:
    with pytest.raises(ValueError):
        plugins.register(kind, scheme, path)  # type: ignore[arg-type]  # a wrong kind on purpose


@pytest.mark.parametrize(
    ("build", "what"),
    [(store_from_url, "store"), (TaskQueue, "task backend"), (cancel_store_from_url, "cancel store")],
)
def test_an_unknown_scheme_names_it_and_the_known_ones_with_the_url_masked(build: Callable[[str], object],
                                                                           what: str) -> None:
    with pytest.raises(StoreConfigError) as error:
        build("ftp://user:hunter2@host/x")
    message = str(error.value)
    assert f"unknown {what} scheme 'ftp'" in message and "use one of" in message and "redis" in message
    assert "hunter2" not in message and "***" in message


def test_the_known_schemes_include_what_installed_packages_declare() -> None:
    assert {"memory", "redis", "rediss", "unix", "mongodb", "mongodb+srv", "django"} <= set(SCHEMES)
    assert {"redis", "rediss", "unix", "amqp", "amqps", "django"} <= set(BACKENDS)
    assert {"redis", "rediss", "unix", "django"} <= set(RECORD_SCHEMES)


@pytest.mark.parametrize("url", [
    "redis://:hunter2@127.0.0.1:6379/0?prefx=app:",
    "rediss://127.0.0.1:6380/0?prefix=app:&retenton=60",
    "redis+cluster://127.0.0.1:7000,127.0.0.1:7001?bogus=1",
    "redis+sentinel://127.0.0.1:26380/mutexcron/0?socket_timeut=2",
    "unix:///tmp/redis.sock?prefx=app:",
])
@pytest.mark.parametrize(("build", "what"), [(store_from_url, "lock store"), (TaskQueue, "task backend"),
                                             (cancel_store_from_url, "record store")])
def test_an_unknown_redis_url_option_is_refused_when_built_naming_it(url: str, build: Callable[[str], object],
                                                                     what: str) -> None:
    """Not later, at the first command, as redis-py's connection would (a TypeError naming a keyword)."""
    with pytest.raises(StoreConfigError, match="unknown option") as raised:
        build(url)
    name = url.rpartition("?")[2].split("&")[-1].partition("=")[0]
    assert repr(name) in str(raised.value), what
    assert "hunter2" not in str(raised.value)


def test_the_redis_connection_options_of_a_url_are_accepted() -> None:
    store = store_from_url("redis://127.0.0.1:6379/0?socket_timeout=3&health_check_interval=10&max_connections=5"
                           "&client_name=app&prefix=app:")
    assert isinstance(store, RedisLockStore)
    store.close()


def test_a_unix_socket_url_reaches_redis_through_its_socket(tmp_path: Path) -> None:
    socket_path = tmp_path / "redis.sock"
    server = start_redis_server(free_port(), "--unixsocket", str(socket_path), "--unixsocketperm", "700")
    try:
        store = store_from_url(f"unix://{socket_path}?db=3&prefix=app:")
        assert isinstance(store, RedisLockStore)
        store.seed(["job"])
        assert store.acquire("job", owner="a", lease=timedelta(seconds=5), fire_time=None).acquired
        assert redis.Redis(unix_socket_path=str(socket_path), db=3).exists(store.key("job"))
        store.close()
    finally:
        stop_process(server)


class _RecordingProxy:
    """A TCP proxy to a Redis server that keeps what each client connection sent, to see its handshake."""

    def __init__(self, host: str, port: int) -> None:
        import socket
        import threading

        self.connections: list[bytearray] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._target = (host, port)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            sent = bytearray()
            self.connections.append(sent)
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(client, server, sent), daemon=True).start()

    def _pump(self, source: Any, destination: Any, keep: bytearray | None) -> None:
        while data := source.recv(65536):
            if keep is not None:
                keep += data
            destination.sendall(data)

    def commands(self) -> list[list[bytes]]:
        """Each connection's command words so far, in order (RESP's array and length lines left out)."""
        return [[line for line in bytes(sent).split(b"\r\n") if line and line[:1] not in b"*$"]
                for sent in list(self.connections)]

    def close(self) -> None:
        self._listener.close()


@pytest.mark.parametrize("kind", ["lock store", "task backend", "record store"])
def test_a_new_redis_connection_asks_nothing_of_the_server_but_hello(redis_server_url: str, kind: str) -> None:
    """Each command of a connection's handshake waits for its reply: on a slow link CLIENT SETINFO (twice) and
    CLIENT MAINT_NOTIFICATIONS delayed a fire's first acquire on a new connection by three round trips."""
    parts = urlsplit(redis_server_url)
    proxy = _RecordingProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    url = f"redis://127.0.0.1:{proxy.port}/0?prefix=handshake-test:"
    try:
        if kind == "lock store":
            made: Any = store_from_url(url)
        elif kind == "task backend":
            made = TaskQueue(url).backend
        else:
            made = cancel_store_from_url(url)
        made.client.ping()
        wait_until(lambda: any(b"PING" in words for words in proxy.commands()), what="the PING to reach the proxy")
        connections = proxy.commands()
        assert any(b"HELLO" in words for words in connections), connections
        assert all(b"CLIENT" not in words for words in connections), connections  # no SETINFO, no MAINT_NOTIFICATIONS
        made.close()
    finally:
        proxy.close()

"""How sleeping SQL task workers hear that something may be due: the wake-up hub of a database alias.

Workers of one process share a hub per alias, fed by this process's producers (after their transaction
commits) and by one thread that hears other processes: ``LISTEN`` on PostgreSQL, a Unix socket of
:mod:`~mutexcron_django.sql.tasks.local_wake` on SQLite and MySQL/MariaDB. A wake-up is only a hint to look now;
see ``docs/sql-tasks.md`` for the whole design.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction

from .local_wake import LocalWakeChannel, WakeListener

logger = logging.getLogger("mutexcron.tasks.django")

CHANNEL = "mutexcron_tasks"  # PostgreSQL LISTEN/NOTIFY channel (channels are per database)
UNLISTENED_MAX_SLEEP = 1.0  # while the LISTEN connection is down, or no wake-up socket could be bound
LISTEN_POLL_SECONDS = 0.1  # the LISTEN and socket threads notice that no worker needs them any more within this
LISTEN_READY_TIMEOUT = 5.0
SQLITE_WAKE_SUFFIX = ".mutexcron-wake"
NOTIFY, SOCKETS = "notify", "sockets"  # how workers of a database hear of other processes' changes

WAKE = None  # a message that means "look again now" (wake(), or a LISTEN connection that was re-opened)
Message = tuple[int, str] | None  # ``(due_ms, task_type)`` (``"*"``: any type) or WAKE


class Inbox:
    """The wake-up messages of one consume() call."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[Message] = []

    def put(self, message: Message) -> None:
        with self.cond:
            self.messages.append(message)
            self.cond.notify_all()

    def take(self) -> list[Message]:
        """The messages received so far (the caller holds ``cond`` or does not care about a race)."""
        messages, self.messages = self.messages, []
        return messages


class WakeModes:
    """How the workers of a database alias hear of changes made elsewhere (computed once per backend)."""

    def __init__(self, alias: str) -> None:
        vendor = connections[alias].vendor
        self.notifies = vendor == "postgresql"  # producers send NOTIFY (plain SQL, any driver)
        self.listens = self.notifies and has_psycopg3()  # workers LISTEN (psycopg 3)
        # How other processes' workers hear of changes: NOTIFY, datagrams (not for in-memory SQLite), or not.
        self.cross_process_wake: str | None = NOTIFY if self.notifies else None
        if vendor in ("sqlite", "mysql") and hasattr(socket, "AF_UNIX") and wake_directory(alias):
            self.cross_process_wake = SOCKETS
        # How this process's workers hear of them: NOTIFY needs psycopg 3 to LISTEN.
        self.heard_by = self.cross_process_wake if self.cross_process_wake != NOTIFY or self.listens else None


class Hub:
    """Every consume() of one database alias in this process, and the thread that turns other processes'
    wake-ups into the same messages (LISTEN on a connection of its own, or this process's socket)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._inboxes: set[Inbox] = set()
        self._listener: threading.Thread | None = None
        self.listening = threading.Event()
        self.socket_path: str | None = None  # this process's wake-up socket: senders here skip it

    def post(self, message: Message) -> None:
        with self._lock:
            inboxes = list(self._inboxes)
        for inbox in inboxes:
            inbox.put(message)

    def subscribe(self, inbox: Inbox, *, wake: str | None) -> None:
        """Add a worker's inbox; the first one starts the thread that hears other processes (``wake``)."""
        with self._lock:
            self._inboxes.add(inbox)
            if wake is not None and self._listener is None:
                self.listening.clear()
                if wake == NOTIFY:
                    target: Callable[[], None] = self._listen
                else:
                    listener = self._bind()
                    if listener is None:
                        return
                    target = functools.partial(self._receive, listener)
                self._listener = threading.Thread(target=target, name=f"mutexcron-task-wake-{self.alias}",
                                                  daemon=True)
                self._listener.start()
        # Listening (confirmed) before the first claim: no notification sent after it can be missed.
        if wake == NOTIFY and not self.listening.wait(LISTEN_READY_TIMEOUT):
            logger.warning("task workers on database %r: LISTEN is not ready; sleeping at most %.1fs meanwhile",
                           self.alias, UNLISTENED_MAX_SLEEP)

    def unsubscribe(self, inbox: Inbox) -> None:
        with self._lock:
            self._inboxes.discard(inbox)
            listener = self._listener if not self._inboxes else None
        if listener is not None:
            # The last worker of this database here: wait (briefly) for the LISTEN connection to close, so
            # that nothing holds the database once the workers stopped (dropping it, e.g. after tests).
            listener.join(LISTEN_POLL_SECONDS + 1.0)

    def _wanted(self) -> bool:
        with self._lock:
            if self._inboxes:
                return True
            self._listener = None  # decided under the lock: a new subscriber starts a new listener
            return False

    def _bind(self) -> WakeListener | None:
        """This process's socket in the wake-up directory, bound before the first claim (lock held)."""
        channel = wake_channel(self.alias)
        if channel is None:
            return None
        try:
            listener = channel.listen()
        except OSError as error:
            logger.warning("task workers on database %r: cannot bind a wake-up socket in %s (%s); tasks scheduled "
                           "by other processes are seen within %.1fs", self.alias, channel.directory, error,
                           UNLISTENED_MAX_SLEEP)
            return None
        self.socket_path = listener.path
        self.listening.set()
        return listener

    def _receive(self, listener: WakeListener) -> None:
        try:
            while self._wanted():
                for raw in listener.receive(timeout=LISTEN_POLL_SECONDS):
                    message = parse_wake(raw.decode("utf-8", "replace"))
                    if message is not None:
                        self.post(message)
        except OSError as error:  # the socket is gone (its directory was removed): look often from now on
            logger.warning("task workers on database %r: wake-up socket: %s", self.alias, error)
            with self._lock:
                self._listener = None
        finally:
            listener.close()
            with self._lock:  # unless a new subscriber bound a new socket meanwhile
                if self.socket_path == listener.path:
                    self.socket_path = None
                    self.listening.clear()

    def _listen(self) -> None:
        import psycopg

        conn: Any = None
        failures = 0
        try:
            while self._wanted():
                try:
                    if conn is None:
                        conn = psycopg.connect(**_listen_params(self.alias), autocommit=True)
                        conn.execute(f"LISTEN {CHANNEL}")
                        if failures:
                            logger.info("task workers on database %r: LISTEN connection re-opened", self.alias)
                            self.post(WAKE)  # notifications may have been lost meanwhile: look now
                        failures = 0
                        self.listening.set()
                    for notify in conn.notifies(timeout=LISTEN_POLL_SECONDS):
                        message = parse_wake(notify.payload)
                        if message is not None:
                            self.post(message)
                except (psycopg.Error, OSError) as error:
                    self.listening.clear()
                    failures += 1
                    if failures == 1:
                        logger.warning("task workers on database %r: LISTEN connection: %s", self.alias, error)
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            conn.close()
                        conn = None
                    time.sleep(min(2.0, 0.1 * 2 ** min(failures, 5)))
        finally:
            self.listening.clear()
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()


_hubs: dict[str, Hub] = {}
_channels: dict[str, LocalWakeChannel] = {}
_hubs_lock = threading.Lock()


def hub(alias: str) -> Hub:
    """This process's hub of ``alias``."""
    with _hubs_lock:
        found = _hubs.get(alias)
        if found is None or found.pid != os.getpid():  # a forked child has none of its parent's threads
            found = _hubs[alias] = Hub(alias)
        return found


def notify(alias: str, mode: str | None, messages: list[str]) -> None:
    """Wake other processes' workers once the current transaction commits: NOTIFY in it (``mode`` NOTIFY),
    or datagrams to the wake-up directory's sockets after it (SOCKETS)."""
    if not messages:
        return
    if mode == NOTIFY:
        with connections[alias].cursor() as cursor:
            for payload in dict.fromkeys(messages):
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload])
        return
    channel = wake_channel(alias) if mode == SOCKETS else None
    if channel is None:
        return
    skip = hub(alias).socket_path  # this process's workers get post()'s messages

    def send() -> None:
        for payload in dict.fromkeys(messages):
            channel.broadcast(payload.encode(), skip=skip)

    transaction.on_commit(send, using=alias)


def post(alias: str, messages: list[Message]) -> None:
    """Wake this process's workers of ``alias`` once the current transaction (if any) commits."""
    if not messages:
        return
    found = hub(alias)

    def deliver() -> None:
        for message in messages:
            found.post(message)

    transaction.on_commit(deliver, using=alias)


def wake_directory(alias: str) -> str | None:
    """Where the processes using this SQLite or MySQL/MariaDB database meet (None: in-memory SQLite)."""
    connection = connections[alias]
    settings = connection.settings_dict
    return _wake_directory_of(connection.vendor, str(settings.get("NAME") or ""), str(settings.get("HOST") or ""),
                              str(settings.get("PORT") or ""))


@functools.lru_cache(maxsize=64)  # every claim and enqueue asks; the settings of an alias rarely change
def _wake_directory_of(vendor: str, name: str, host: str, port: str) -> str | None:
    if vendor == "sqlite":
        if not name or name == ":memory:" or "mode=memory" in name:
            return None
        path = name.removeprefix("file:").split("?", 1)[0]
        return os.path.realpath(path) + SQLITE_WAKE_SUFFIX
    digest = hashlib.sha256(f"{host or 'localhost'}:{port}/{name}".encode()).hexdigest()[:16]
    # One per user (the uid in the name): the channel refuses a directory of someone else's, or one others can enter.
    return os.path.join(tempfile.gettempdir(), f"mutexcron-wake-{os.geteuid()}-{digest}")


def wake_channel(alias: str) -> LocalWakeChannel | None:
    directory = wake_directory(alias)
    if directory is None:
        return None
    with _hubs_lock:
        channel = _channels.get(directory)
        if channel is None:
            # Beside a SQLite file, the directory is shared like the file; in the temp directory it is private.
            follows = directory.removesuffix(SQLITE_WAKE_SUFFIX) if connections[alias].vendor == "sqlite" else None
            channel = _channels[directory] = LocalWakeChannel(directory, follows=follows)
        return channel


def _listen_params(alias: str) -> dict[str, Any]:
    params = dict(connections[alias].get_connection_params())
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return params


def has_psycopg3() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:  # psycopg2: no LISTEN here; workers are bounded by max_sleep instead
        return False
    return True


def wake_payload(due_ms: int, task_type: str) -> str:
    return f"{due_ms} {task_type}"


def parse_wake(payload: str) -> tuple[int, str] | None:
    due, _, task_type = payload.partition(" ")
    try:
        return int(due), task_type
    except ValueError:
        return None

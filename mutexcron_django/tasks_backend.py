"""Delayed tasks in the app's own SQL database: ``TaskQueue("django://[alias][?max_sleep=…&retention=…]")``.

One row per task in the ``ScheduledTask`` model (table ``mutexcron_scheduledtask``): ``id`` (the uuid hex
TaskQueue gives), ``task_type``, ``payload`` (JSON text), ``run_at``, ``due`` (when it may run next: a retry
moves it), ``status``, ``attempts``, ``claims`` (how many claims ever), ``claim_token`` (the token of the
claim that holds a running task), ``claimed_by``, ``visible_until``, ``error`` and timestamps. Every time
that decides something is the database's clock, in UTC whatever the session's time zone (dbclock.py), as in
the SQL lock store, except ``run_at`` itself, which the producer computes (``delay`` is added to its clock).

**Claim.** PostgreSQL and MySQL/MariaDB: in one transaction, for each task type, ``SELECT … WHERE status =
'scheduled' AND task_type = … AND due <= now ORDER BY due LIMIT n FOR UPDATE SKIP LOCKED`` (the index
(status, task_type, due) gives the order, so each reads and locks at most ``n`` rows), the earliest ``n``
of those, then ``UPDATE … SET status = 'running', claim_token = <new token>, attempts + 1, visible_until
= now + visibility timeout WHERE id IN (those)``. Two workers never lock the same row, so
they never get the same task and never wait for each other. SQLite (one writer at a time): one
conditional ``UPDATE … WHERE id IN (SELECT id … due <= now ORDER BY due LIMIT n) AND status =
'scheduled'`` in autocommit, then the rows marked with this claim's token are read back. Before each
claim, running tasks whose ``visible_until`` passed (their worker died or hung) go back to
``scheduled``, due now, with the attempt counted.

**Owner token.** Ack, retry_later, fail, release and the heartbeat's extension are ``UPDATE … WHERE id =
… AND status = 'running' AND claim_token = <the delivery's token>``: a worker whose claim expired (and
was re-claimed by another) changes nothing. A heartbeat thread per worker extends the claims of its
deliveries (prefetched ones included) every third of their visibility timeout. Cancel is ``UPDATE …
SET status = 'cancelled' WHERE id = … AND status = 'scheduled'`` (True when one row changed): it races
with claims on the row itself, so a task is either cancelled or run, never both. A failed task is kept
(with its error) until ``retry(id)``; succeeded and cancelled ones are deleted ``retention`` after they
finished (default 7 days, ``?retention=<seconds>``), by the workers, at most once an hour.

**Waking, without polling at a fixed interval.** After a claim that found nothing, a worker reads with
one query the earliest ``due`` of its task types and the earliest ``visible_until`` of their running
tasks (and the database's time), and sleeps until then. It is woken early:

* in the same process (any database), through an in-process condition: ``enqueue`` (once its
  transaction commits), ``retry``, ``retry_later``, a release and a re-queued expired claim post the due
  time of what they changed to every worker of that database alias in the process;
* across processes on PostgreSQL, by ``LISTEN``/``NOTIFY`` on channel ``mutexcron_tasks``: the enqueue
  transaction sends ``NOTIFY`` (delivered when it commits, not at all if it rolls back) with the earliest
  due time per task type, and a claim sends its visibility deadline, so that sleeping workers take over
  a dead worker's tasks on time. Each process LISTENs on one psycopg (3) connection of its own, opened by
  a thread beside its workers (and closed when the last of them stops); a worker does its first claim
  only once LISTEN is in place, and looks again whenever that connection had to be re-opened;
* across processes of one machine on SQLite and MySQL/MariaDB, which have no notification channel, by
  datagrams (:mod:`mutexcron.tasks.local_wake`): each process with workers binds a Unix socket in a
  directory of the database's own, and the same messages NOTIFY would carry are sent to every socket
  there once the transaction commits. The directory is ``<database file>.mutexcron-wake/`` beside a
  SQLite file (so every process that can write the database can use it, containers sharing its volume
  included; it may be written by those who may write the file, no one else), and
  ``<temp dir>/mutexcron-wake-<uid>-<hash of host, port and name>/`` for MySQL/MariaDB (private: mode 0700,
  this user's). A directory that fails these checks, or is a symlink, is refused with a warning;
* a task scheduled where no wake-up reaches the workers (MySQL/MariaDB from another machine, a process
  that cannot write the directory, a refused directory) is seen at the latest after ``max_sleep``, the
  longest a waiting worker sleeps without looking. Such a look is one read (the earliest due time); the
  worker claims only when something is due. ``max_sleep`` defaults to 1 s on MySQL/MariaDB (``django://?max_sleep=0.2``),
  and to 60 s on PostgreSQL and SQLite, where it only covers lost wake-ups (and is 1 s while a worker
  cannot LISTEN or bind its socket).

**Connections.** Django connections belong to a thread. A worker calls ``close_old_connections()`` before
and after each claim/run cycle (a long-lived worker survives restarts of the database; ``CONN_MAX_AGE`` is
honoured, so with Django's default of 0 every cycle opens a connection: about 4 ms and cold catalog caches
on PostgreSQL, which is most of its ~10 ms start lateness; ``CONN_MAX_AGE = 60`` or a pool brings it to
~3-5 ms), it holds no connection while it sleeps (unless ``CONN_MAX_AGE`` keeps one), and it closes its
connections when it stops. Database errors are raised as :class:`~mutexcron.errors.StoreUnavailable`
(deadlocks and lock timeouts are retried twice first); after one, an unusable connection is closed so
that the next call reconnects.

**Limits.** ``run_at`` comes from the producer's clock and ``now`` from the database's: a skew between
them shifts start times by as much. LISTEN needs psycopg 3 (with psycopg2, PostgreSQL workers fall back
to ``max_sleep``, 1 s). The socket wake-ups need Unix domain sockets (not Windows). The in-process
wake-ups need ``transaction.on_commit``, so a task scheduled inside a transaction that never commits
(Django's ``TestCase``) wakes nobody, as it should.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar
from urllib.parse import unquote, urlsplit

from django.db import Error, close_old_connections, connections, router, transaction
from django.db.models import Case, CharField, DateTimeField, F, Value, When
from django.db.models.functions import Cast, Coalesce, Concat

from mutexcron.errors import StoreConfigError, StoreUnavailable
from mutexcron.tasks.backends.base import (
    ClaimHeartbeat,
    ClaimingConsumer,
    Delivery,
    TaskBackend,
    consumed_types,
    run_batch,
    warn_stale_settle,
)
from mutexcron.tasks.local_wake import LocalWakeChannel, WakeListener
from mutexcron.tasks.model import NewTask, TaskInfo, TaskStatus
from mutexcron.urls import mask_url, pop_query_options

from .dbclock import AsUTC, DbNow, aware, now_minus, now_plus, now_sql, utc_sql
from .models import ScheduledTask

__all__ = ["DbNow", "DjangoDelivery", "DjangoTaskBackend"]

logger = logging.getLogger("mutexcron.tasks.django")

CHANNEL = "mutexcron_tasks"  # PostgreSQL LISTEN/NOTIFY channel (channels are per database)
DEFAULT_MAX_SLEEP = 1.0  # seconds; MySQL/MariaDB: producers on other machines cannot wake workers
DEFAULT_MAX_SLEEP_NOTIFIED = 60.0  # seconds; PostgreSQL (NOTIFY), SQLite (sockets): this covers lost wake-ups
UNLISTENED_MAX_SLEEP = 1.0  # while the LISTEN connection is down, or no wake-up socket could be bound
DEFAULT_RETENTION = timedelta(days=7)
PRUNE_EVERY = 3600.0  # seconds between two deletions of old finished tasks by one worker
PRUNE_CHUNK = 1000
STOP_CHECK_SECONDS = 0.25  # a waiting worker notices a set ``stop`` within this, even without wake()
LISTEN_POLL_SECONDS = 0.1  # the LISTEN and socket threads notice that no worker needs them any more within this
BUSY_PAUSE = 0.005  # seconds: due tasks exist but another worker holds them (for a few ms)
WARM_UP_AHEAD = 0.05  # seconds: a sleeping worker connects this long before a known due time
ENQUEUE_CHUNK = 500
REQUEUE_LIMIT = 100  # expired claims put back per claim call
LISTEN_READY_TIMEOUT = 5.0
MAX_ERROR_CHARS = 32_000
DEADLOCK_RETRIES = 3

Status = ScheduledTask.Status
P = ParamSpec("P")
T = TypeVar("T")


def _ms(value: datetime) -> int:
    return round(value.timestamp() * 1000)


def _seconds(raw: str, name: str, url: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise StoreConfigError(
            f"task backend URL {mask_url(url)!r}: {name}={raw!r} must be a positive number of seconds"
        )
    return value


def _clip(error: str) -> str:
    """A handler's traceback, shortened in the middle if it is huge."""
    error = str(error)
    if len(error) <= MAX_ERROR_CHARS:
        return error
    half = MAX_ERROR_CHARS // 2
    return f"{error[:half]}\n[…]\n{error[-half:]}"


def _is_retryable(error: BaseException) -> bool:
    """A deadlock, serialization failure, lock wait timeout or a busy SQLite file: worth one more try."""
    cause = error.__cause__ or error
    if getattr(cause, "sqlstate", None) in ("40P01", "40001", "55P03"):
        return True
    args = getattr(cause, "args", ())
    if args and args[0] in (1205, 1213):  # MySQL/MariaDB: lock wait timeout, deadlock
        return True
    return "database is locked" in str(cause)


# -- in-process wake-ups -------------------------------------------------------------------------------

WAKE = None  # a message that means "look again now" (wake(), or a LISTEN connection that was re-opened)


class _Inbox:
    """The wake-up messages of one consume() call: ``(due_ms, task_type)`` (``"*"``: any type) or WAKE."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[tuple[int, str] | None] = []

    def put(self, message: tuple[int, str] | None) -> None:
        with self.cond:
            self.messages.append(message)
            self.cond.notify_all()

    def take(self) -> list[tuple[int, str] | None]:
        """The messages received so far (the caller holds ``cond`` or does not care about a race)."""
        messages, self.messages = self.messages, []
        return messages


NOTIFY, SOCKETS = "notify", "sockets"  # how workers of a database hear of other processes' changes


class _Hub:
    """Every consume() of one database alias in this process: in-process wake-ups, and the thread that
    turns other processes' wake-ups into the same messages: it LISTENs on a connection of its own
    (PostgreSQL) or receives on this process's socket of the wake-up directory (SQLite, MySQL/MariaDB)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._inboxes: set[_Inbox] = set()
        self._listener: threading.Thread | None = None
        self.listening = threading.Event()
        self.socket_path: str | None = None  # this process's wake-up socket: senders here skip it

    def post(self, message: tuple[int, str] | None) -> None:
        with self._lock:
            inboxes = list(self._inboxes)
        for inbox in inboxes:
            inbox.put(message)

    def subscribe(self, inbox: _Inbox, *, wake: str | None) -> None:
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
                    target = lambda: self._receive(listener)  # noqa: E731
                self._listener = threading.Thread(target=target, name=f"mutexcron-task-wake-{self.alias}",
                                                  daemon=True)
                self._listener.start()
        # Listening (confirmed) before the first claim: no notification sent after it can be missed.
        if wake == NOTIFY and not self.listening.wait(LISTEN_READY_TIMEOUT):
            logger.warning("task workers on database %r: LISTEN is not ready; sleeping at most %.1fs meanwhile",
                           self.alias, UNLISTENED_MAX_SLEEP)

    def _bind(self) -> WakeListener | None:
        """This process's socket in the wake-up directory, bound before the first claim (lock held)."""
        channel = _channel(self.alias)
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
                    message = _parse_wake(raw.decode("utf-8", "replace"))
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

    def unsubscribe(self, inbox: _Inbox) -> None:
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
                        message = _parse_wake(notify.payload)
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


_hubs: dict[str, _Hub] = {}
_hubs_lock = threading.Lock()


def _hub(alias: str) -> _Hub:
    with _hubs_lock:
        hub = _hubs.get(alias)
        if hub is None or hub.pid != os.getpid():  # a forked child has none of its parent's threads
            hub = _hubs[alias] = _Hub(alias)
        return hub


_channels: dict[str, LocalWakeChannel] = {}
SQLITE_WAKE_SUFFIX = ".mutexcron-wake"


def _wake_directory(alias: str) -> str | None:
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


def _channel(alias: str) -> LocalWakeChannel | None:
    directory = _wake_directory(alias)
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


def _wake_payload(due_ms: int, task_type: str) -> str:
    return f"{due_ms} {task_type}"


def _parse_wake(payload: str) -> tuple[int, str] | None:
    due, _, task_type = payload.partition(" ")
    try:
        return int(due), task_type
    except ValueError:
        return None


# -- the backend -----------------------------------------------------------------------------------------


class DjangoTaskBackend(TaskBackend):
    """The ``ScheduledTask`` model as a task backend (see the module docstring for the protocol).

    ``using``: the database alias (default: the router's for ScheduledTask). ``max_sleep``: the longest
    a waiting worker sleeps without looking (default 1 s on MySQL/MariaDB; 60 s on PostgreSQL and SQLite,
    whose workers every producer wakes). ``retention``: how long succeeded and cancelled tasks are kept
    (default 7 days).
    """

    def __init__(
        self,
        using: str | None = None,
        *,
        max_sleep: timedelta | float | None = None,
        retention: timedelta | float = DEFAULT_RETENTION,
    ) -> None:
        self.using = using or router.db_for_write(ScheduledTask)
        if self.using not in connections.databases:
            known = ", ".join(sorted(connections.databases))
            raise StoreConfigError(f"django://{self.using}: no database alias {self.using!r} (DATABASES has {known})")
        self.vendor = connections[self.using].vendor
        self.notifies = self.vendor == "postgresql"  # producers send NOTIFY (plain SQL, any driver)
        self.listens = self.notifies and _has_psycopg3()  # workers LISTEN (psycopg 3)
        # How other processes' workers hear of changes: NOTIFY, datagrams (not for in-memory SQLite), or not.
        self.cross_process_wake: str | None = NOTIFY if self.notifies else None
        if self.vendor in ("sqlite", "mysql") and hasattr(socket, "AF_UNIX") and _wake_directory(self.using):
            self.cross_process_wake = SOCKETS
        # How this process's workers hear of them: NOTIFY needs psycopg 3 to LISTEN.
        self.heard_by = self.cross_process_wake if self.cross_process_wake != NOTIFY or self.listens else None
        if max_sleep is None:
            # On SQLite every producer is on this machine, so every producer can wake the workers.
            woken = self.listens or (self.vendor == "sqlite" and self.cross_process_wake == SOCKETS)
            max_sleep = DEFAULT_MAX_SLEEP_NOTIFIED if woken else DEFAULT_MAX_SLEEP
        self.max_sleep = _positive_seconds(max_sleep, "max_sleep")
        self.retention = timedelta(seconds=_positive_seconds(retention, "retention"))
        self._inboxes: set[_Inbox] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, *, cancel_store: str | None = None) -> DjangoTaskBackend:
        """``django://`` (the router's database), ``django://<alias>``; options ``?max_sleep=<seconds>``
        and ``?retention=<seconds>``. Connects to nothing."""
        if cancel_store is not None:
            raise StoreConfigError(
                "the Django task backend cancels atomically in its own table: it takes no cancel_store "
                f"(given {mask_url(str(cancel_store))!r})"
            )
        cleaned, options = pop_query_options(url, ("max_sleep", "retention"))
        parts = urlsplit(cleaned)
        if parts.query or parts.fragment or parts.path.strip("/"):
            raise StoreConfigError(
                f"malformed task backend URL {mask_url(url)!r}: use django://[alias][?max_sleep=<seconds>"
                "&retention=<seconds>]"
            )
        kwargs: dict[str, Any] = {}
        for name in ("max_sleep", "retention"):
            if name in options:
                kwargs[name] = _seconds(options[name], name, url)
        return cls(unquote(parts.netloc) or None, **kwargs)

    @property
    def _tasks(self):  # type: ignore[no-untyped-def]
        return ScheduledTask.objects.using(self.using)

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        for attempt in range(DEADLOCK_RETRIES):
            try:
                return operation(*args, **kwargs)
            except Error as error:
                if attempt + 1 < DEADLOCK_RETRIES and _is_retryable(error) and not self._in_atomic():
                    time.sleep(0.01 * (attempt + 1))
                    continue
                _drop_if_broken(self.using)
                raise StoreUnavailable(f"task backend django://{self.using}: {type(error).__name__}: {error}") \
                    from error
        raise AssertionError("unreachable")

    def _in_atomic(self) -> bool:
        return connections[self.using].in_atomic_block

    def _notify(self, messages: list[str]) -> None:
        """Wake other processes' workers once the current transaction commits: NOTIFY in it (PostgreSQL),
        or datagrams to the wake-up directory's sockets after it (SQLite, MySQL/MariaDB)."""
        if not messages:
            return
        if self.notifies:
            with connections[self.using].cursor() as cursor:
                for payload in dict.fromkeys(messages):
                    cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload])
            return
        channel = _channel(self.using) if self.cross_process_wake == SOCKETS else None
        if channel is None:
            return
        skip = _hub(self.using).socket_path  # this process's workers get _post()'s messages

        def send() -> None:
            for payload in dict.fromkeys(messages):
                channel.broadcast(payload.encode(), skip=skip)

        transaction.on_commit(send, using=self.using)

    def _post(self, messages: list[tuple[int, str] | None]) -> None:
        """Wake this process's workers of this database once the current transaction (if any) commits."""
        if not messages:
            return
        hub = _hub(self.using)

        def post() -> None:
            for message in messages:
                hub.post(message)

        transaction.on_commit(post, using=self.using)

    # -- producing --------------------------------------------------------------------------------

    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        if not tasks:
            return
        earliest: dict[str, int] = {}
        for task in tasks:
            due = _ms(task.run_at)
            earliest[task.task_type] = min(due, earliest.get(task.task_type, due))

        def run() -> None:
            with transaction.atomic(using=self.using):
                for start in range(0, len(tasks), ENQUEUE_CHUNK):
                    rows = [
                        ScheduledTask(
                            id=task.id, task_type=task.task_type, payload=task.payload, run_at=task.run_at,
                            due=task.run_at, status=Status.SCHEDULED, created_at=DbNow(), updated_at=DbNow(),
                        )
                        for task in tasks[start : start + ENQUEUE_CHUNK]
                    ]
                    self._tasks.bulk_create(rows, ignore_conflicts=True)  # an existing id is left as it is
                self._notify([_wake_payload(due, task_type) for task_type, due in earliest.items()])
                self._post([(due, task_type) for task_type, due in earliest.items()])

        self._call(run)

    def cancel(self, task_id: str) -> bool:
        if not isinstance(task_id, str) or not task_id:
            return False
        return self._call(lambda: self._tasks.filter(pk=task_id, status=Status.SCHEDULED).update(
            status=Status.CANCELLED, finished_at=DbNow(), updated_at=DbNow(), visible_until=None) == 1)

    def info(self, task_id: str) -> TaskInfo | None:
        if not isinstance(task_id, str) or not task_id:
            return None
        row = self._call(lambda: self._tasks.filter(pk=task_id).annotate(utc_run_at=AsUTC("run_at")).first())
        return _info(row) if row is not None else None

    def store_result(self, task_id: str, text: str) -> bool:
        """Keep ``text`` (a django.tasks result) on the task's row; False if the task is unknown."""
        return self._call(lambda: self._tasks.filter(pk=task_id).update(result=text) == 1)

    def load_result(self, task_id: str) -> str | None:
        return self._call(lambda: self._tasks.filter(pk=task_id).values_list("result", flat=True).first())

    def retry(self, task_id: str) -> bool:
        if not isinstance(task_id, str) or not task_id:
            return False

        def run() -> bool:
            with transaction.atomic(using=self.using):
                changed = self._tasks.filter(pk=task_id, status=Status.FAILED).update(
                    status=Status.SCHEDULED, attempts=0, due=DbNow(), finished_at=None, claim_token=None,
                    visible_until=None, updated_at=DbNow(),
                )
                if changed != 1:
                    return False
                task_type = self._tasks.filter(pk=task_id).values_list("task_type", flat=True).first() or "*"
                self._notify([_wake_payload(0, task_type)])
                self._post([(0, task_type)])
                return True

        return self._call(run)

    def failed(self, limit: int = 100) -> list[str]:
        """Ids of failed tasks, most recent first."""
        return self._call(lambda: list(self._tasks.filter(status=Status.FAILED).order_by("-finished_at")
                                       .values_list("pk", flat=True)[: max(0, limit)]))

    def prune(self, older_than: timedelta | None = None) -> int:
        """Delete succeeded and cancelled tasks that finished longer than ``older_than`` (default: the
        retention) ago; failed ones are kept until retried. Returns how many were deleted."""
        cutoff = now_minus(older_than if older_than is not None else self.retention)

        def run() -> int:
            deleted = 0
            while True:
                ids = list(self._tasks.filter(status__in=[Status.SUCCEEDED, Status.CANCELLED], finished_at__lt=cutoff)
                           .values_list("pk", flat=True)[:PRUNE_CHUNK])
                if not ids:
                    return deleted
                deleted += self._tasks.filter(pk__in=ids).delete()[0]

        return self._call(run)

    # -- consuming --------------------------------------------------------------------------------

    def consume(
        self,
        task_types: Sequence[str],
        handle: Callable[[Delivery], None],
        stop: threading.Event,
        *,
        visibility_timeout: Callable[[str], timedelta],
        prefetch: int = 10,
    ) -> None:
        consumer = _Consumer(self, consumed_types(task_types), handle, stop, visibility_timeout,
                             max(1, int(prefetch)))
        with self._lock:
            self._inboxes.add(consumer.inbox)
        try:
            consumer.run()
        finally:
            with self._lock:
                self._inboxes.discard(consumer.inbox)

    def wake(self) -> None:
        with self._lock:
            inboxes = list(self._inboxes)
        for inbox in inboxes:
            inbox.put(WAKE)

    def close(self) -> None:
        """Nothing to release: Django owns the connections (each worker closes its own when it stops)."""

    def __repr__(self) -> str:
        return f"<DjangoTaskBackend database={self.using!r} max_sleep={self.max_sleep}s>"

    # -- what a consumer runs -------------------------------------------------------------------------

    def _requeue_expired(self) -> None:
        """Running tasks whose claim expired (worker dead or hung) are scheduled again, due now."""
        expired = list(self._tasks.filter(status=Status.RUNNING, visible_until__lte=DbNow())
                       .values_list("pk", "task_type")[:REQUEUE_LIMIT])
        if not expired:
            return
        why = Concat(
            Value("visibility timeout: worker "), Coalesce(F("claimed_by"), Value("?")),
            Value(" did not finish attempt "), Cast(F("attempts"), output_field=CharField()),
            output_field=CharField(),
        )
        with transaction.atomic(using=self.using):
            changed = self._tasks.filter(
                pk__in=[pk for pk, _ in expired], status=Status.RUNNING, visible_until__lte=DbNow()
            ).update(status=Status.SCHEDULED, due=DbNow(), claim_token=None, visible_until=None, error=why,
                     updated_at=DbNow())
            if changed:
                types = sorted({task_type for _, task_type in expired})
                logger.warning("%d task(s) of %s went back to scheduled: their claim expired", changed,
                               ", ".join(types))
                self._notify([_wake_payload(0, task_type) for task_type in types])
                self._post([(0, task_type) for task_type in types])

    def _claim(self, types: list[str], limit: int, owner: str,
               visibility: dict[str, timedelta]) -> list[DjangoDelivery]:
        """Claim up to ``limit`` due tasks of ``types`` for ``owner``."""
        self._requeue_expired()
        token = uuid.uuid4().hex
        if len(set(visibility.values())) == 1:
            until: Any = now_plus(next(iter(visibility.values())))
        else:
            until = Case(*(When(task_type=t, then=now_plus(v)) for t, v in visibility.items()),
                         default=now_plus(max(visibility.values())), output_field=DateTimeField())
        changes = {
            "status": Status.RUNNING, "attempts": F("attempts") + 1, "claims": F("claims") + 1,
            "claim_token": token, "claimed_by": owner, "visible_until": until, "started_at": DbNow(),
            "updated_at": DbNow(),
        }
        due = self._tasks.filter(status=Status.SCHEDULED, due__lte=DbNow())
        fields = ("pk", "task_type", "payload", "attempts")
        if self.vendor == "sqlite":
            # One writer at a time: the conditional UPDATE picks and marks the rows in one statement.
            chosen = due.filter(task_type__in=types).order_by("due", "pk").values("pk")[:limit]
            if self._tasks.filter(pk__in=chosen, status=Status.SCHEDULED).update(**changes) == 0:
                return []
            if self.cross_process_wake:  # sleeping workers learn when these claims expire (if this worker dies)
                # SQLite's clock is this machine's: the deadline is near enough without reading it back.
                shortest = min(visibility[t] for t in types)
                self._notify([_wake_payload(_ms(datetime.now(UTC) + shortest), "*")])
            rows = list(self._tasks.filter(status=Status.RUNNING, task_type__in=types, claim_token=token)
                        .order_by("due", "pk").values_list(*fields))
            return [DjangoDelivery(self, pk, task_type, payload, attempts, token, visibility[task_type])
                    for pk, task_type, payload, attempts in rows]
        with transaction.atomic(using=self.using):
            picked: list[tuple[Any, ...]] = []
            # One query per type: the index (status, task_type, due) gives each one's order, so each stops
            # after ``limit`` rows (one query with IN would sort every due row, and MySQL would lock them all).
            for task_type in types:
                picked += list(due.filter(task_type=task_type).select_for_update(skip_locked=True)
                               .annotate(utc_due=AsUTC("due"), db_now=AsUTC(DbNow())).order_by("due", "pk")
                               .values_list("utc_due", *fields, "db_now")[:limit])
            picked = sorted(picked, key=lambda row: (row[0], row[1]))[:limit]  # the rest is unlocked at commit
            if not picked:
                return []
            self._tasks.filter(pk__in=[row[1] for row in picked]).update(**changes)
            if self.cross_process_wake:  # sleeping workers learn when these claims expire (if this worker dies)
                shortest = min(visibility[row[2]] for row in picked)
                deadline = _ms(aware(picked[0][-1]) + shortest)  # type: ignore[operator]
                self._notify([_wake_payload(deadline, "*")])
        return [DjangoDelivery(self, pk, task_type, payload, attempts + 1, token, visibility[task_type])
                for _, pk, task_type, payload, attempts, _ in picked]

    def _next(self, types: list[str]) -> tuple[int, int | None]:
        """The database's now, and the earliest due time of ``types`` or visibility deadline of their
        running tasks (None: nothing), in ms: one query."""
        connection = connections[self.using]
        qn = connection.ops.quote_name
        table = qn(ScheduledTask._meta.db_table)
        status, task_type, due, until = (qn(c) for c in ("status", "task_type", "due", "visible_until"))
        columns = [now_sql(self.vendor)]
        params: list[Any] = []
        for one in types:
            earliest = f"(SELECT MIN({due}) FROM {table} WHERE {status} = %s AND {task_type} = %s)"
            columns.append(utc_sql(self.vendor, earliest))
            params += [Status.SCHEDULED.value, one]
        marks = ", ".join(["%s"] * len(types))
        soonest = f"(SELECT MIN({until}) FROM {table} WHERE {status} = %s AND {task_type} IN ({marks}))"
        columns.append(utc_sql(self.vendor, soonest))
        params += [Status.RUNNING.value, *types]
        with connection.cursor() as cursor:
            cursor.execute("SELECT " + ", ".join(columns), params)
            row = cursor.fetchone()
        now = aware(row[0])
        assert now is not None
        times = [_ms(t) for t in (aware(value) for value in row[1:]) if t is not None]
        return _ms(now), (min(times) if times else None)

    def _settle(self, delivery: DjangoDelivery, what: str, wake: tuple[int, str] | None = None,
                **changes: Any) -> bool:
        if delivery.heartbeat is not None:
            delivery.heartbeat.untrack(delivery)

        def run() -> int:
            mine = self._tasks.filter(pk=delivery.id, status=Status.RUNNING, claim_token=delivery.token)
            return mine.update(updated_at=DbNow(), visible_until=None, **changes)

        if self._call(run) == 1:
            if wake is not None:
                self._post([wake])
            return True
        warn_stale_settle(delivery, what)
        return False

    def _release(self, delivery: DjangoDelivery) -> None:
        def run() -> int:
            with transaction.atomic(using=self.using):
                mine = self._tasks.filter(pk=delivery.id, status=Status.RUNNING, claim_token=delivery.token)
                changed = mine.update(status=Status.SCHEDULED, attempts=F("attempts") - 1, claim_token=None,
                                      visible_until=None, updated_at=DbNow())
                if changed:
                    self._notify([_wake_payload(0, delivery.task_type)])
                    self._post([(0, delivery.task_type)])
                return changed

        if delivery.heartbeat is not None:
            delivery.heartbeat.untrack(delivery)
        if self._call(run) != 1:
            logger.warning("task %s (%s): could not release attempt %d: the claim expired",
                           delivery.id, delivery.task_type, delivery.attempt)

    def _extend(self, deliveries: list[DjangoDelivery]) -> set[DjangoDelivery]:
        """Extend the claims of ``deliveries`` to now + their visibility timeout; the ones still held."""
        kept: set[DjangoDelivery] = set()
        groups: dict[tuple[str, timedelta], list[DjangoDelivery]] = {}
        for delivery in deliveries:
            groups.setdefault((delivery.token, delivery.visibility), []).append(delivery)
        for (token, visibility), group in groups.items():
            ids = [d.id for d in group]
            mine = self._tasks.filter(pk__in=ids, status=Status.RUNNING, claim_token=token)
            if mine.update(visible_until=now_plus(visibility)) == len(ids):
                kept.update(group)
            else:
                held = set(mine.values_list("pk", flat=True))
                kept.update(d for d in group if d.id in held)
        return kept


def _drop_if_broken(alias: str) -> None:
    """After a database error outside a transaction, close this thread's connection if it is unusable (or
    past CONN_MAX_AGE), so that the next call reconnects: threads that no request cycle cleans up (a
    producer thread, a broker's consumer) would otherwise keep a dead connection for ever."""
    connection = connections[alias]
    if not connection.in_atomic_block:
        with contextlib.suppress(Exception):
            connection.close_if_unusable_or_obsolete()


def _has_psycopg3() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:  # psycopg2: no LISTEN here; workers are bounded by max_sleep instead
        return False
    return True


def _positive_seconds(value: timedelta | float, name: str) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise StoreConfigError(f"Django task backend: {name} must be a positive timedelta or seconds, not {value!r}")
    return float(value)


def _status(value: str | None) -> TaskStatus:
    try:
        return TaskStatus(value)
    except ValueError:
        return TaskStatus.UNKNOWN


def _info(row: ScheduledTask) -> TaskInfo:
    try:
        payload: object = json.loads(row.payload)
    except ValueError:
        payload = row.payload  # not JSON (written by hand): shown as it is
    return TaskInfo(
        id=row.id, task_type=row.task_type, payload=payload, run_at=aware(row.utc_run_at), status=_status(row.status),
        attempts=row.attempts, error=row.error or None,
    )


@dataclass(eq=False)
class DjangoDelivery(Delivery):
    """A claimed task; ``token`` (the claim's) proves the claim is still this worker's."""

    backend: DjangoTaskBackend
    id: str
    task_type: str
    payload: str
    attempt: int
    token: str
    visibility: timedelta
    heartbeat: _Heartbeat | None = field(default=None, repr=False)

    @property
    def visibility_seconds(self) -> float:
        return self.visibility.total_seconds()

    def ack(self) -> None:
        self.backend._settle(self, "ack", status=Status.SUCCEEDED, finished_at=DbNow())

    def retry_later(self, delay: timedelta, error: str) -> None:
        due_ms = round((time.time() + max(delay, timedelta(0)).total_seconds()) * 1000)
        self.backend._settle(self, "schedule a retry of", (due_ms, self.task_type), status=Status.SCHEDULED,
                             due=now_plus(max(delay, timedelta(0))), claim_token=None, error=_clip(error))

    def fail(self, error: str) -> None:
        self.backend._settle(self, "fail", status=Status.FAILED, error=_clip(error), finished_at=DbNow())

    def release(self) -> None:
        """Give the task back unrun (the worker is stopping): due again at once, this attempt not counted."""
        self.backend._release(self)


class _Heartbeat(ClaimHeartbeat[DjangoDelivery]):
    """Extends the claims due for it with one UPDATE per round (see :class:`ClaimHeartbeat`), then closes
    its database connection: heartbeats are rare (every few minutes with the default timeout)."""

    def __init__(self, backend: DjangoTaskBackend) -> None:
        self.backend = backend
        super().__init__()

    def extend(self, batch: list[DjangoDelivery]) -> set[DjangoDelivery]:
        return self.backend._call(self.backend._extend, batch)

    def round_done(self) -> None:
        connections[self.backend.using].close()


class _Consumer(ClaimingConsumer):
    """One consume() call: claim, run, and sleep until something may be due (or a wake-up)."""

    def __init__(
        self,
        backend: DjangoTaskBackend,
        types: list[str],
        handle: Callable[[Delivery], None],
        stop: threading.Event,
        visibility_timeout: Callable[[str], timedelta],
        limit: int,
    ) -> None:
        super().__init__(types, handle, stop, visibility_timeout, limit)
        self.backend = backend
        self.inbox = _Inbox()
        self.hub = _hub(backend.using)
        self.next_prune = time.monotonic()
        self.warmed_at: float | None = None

    def run(self) -> None:
        self.hub.subscribe(self.inbox, wake=self.backend.heard_by)
        heartbeat = _Heartbeat(self.backend)
        try:
            self._loop(heartbeat)
        finally:
            heartbeat.close()
            self.hub.unsubscribe(self.inbox)
            # This thread's connections (Django's are per thread): all of them in a worker thread, which
            # ends with this call; only ours in the main thread (run_worker() in a command), not the app's.
            if threading.current_thread() is threading.main_thread():
                connections[self.backend.using].close()
            else:
                connections.close_all()

    @contextlib.contextmanager
    def _cycle(self) -> Iterator[None]:
        """close_old_connections() before and after (as around a request), except that a connection
        opened for this cycle by :meth:`_warm_up` a moment ago is kept for it."""
        if self.warmed_at is None or time.monotonic() - self.warmed_at > WARM_UP_AHEAD + 1.0:
            close_old_connections()
        self.warmed_at = None
        try:
            yield
        finally:
            close_old_connections()

    def _loop(self, heartbeat: _Heartbeat) -> None:
        look_first = False  # after an idle wake-up (max_sleep): one read, and a claim only if something is due
        while not self.stop.is_set():
            with self.inbox.cond:
                self.inbox.take()  # what the claim or look about to run sees anyway
            claimed_at = time.monotonic()
            next_due: tuple[int, int | None] | None = None
            try:
                with self._cycle():
                    if look_first:
                        next_due = self.backend._call(self.backend._next, self.types)
                        now_ms, next_ms = next_due
                        if next_ms is not None and next_ms <= now_ms:
                            next_due = None  # due now: claim
                    if next_due is None:
                        next_due = self._claim_and_run(heartbeat, claimed_at)
                    self._maybe_prune()
            except StoreUnavailable as error:
                self.store_failed(error)  # raised at the first contact: a wrong alias, a database down or not migrated
                look_first = False
                continue
            self.store_answered()
            look_first = next_due is not None and not self._sleep(*next_due, time.monotonic())

    def _claim_and_run(self, heartbeat: _Heartbeat, claimed_at: float) -> tuple[int, int | None] | None:
        """Claim and run a batch (then None: look again at once), or, if none was due, when to look again."""
        visibility = {t: self.visibility_timeout(t) for t in self.types}
        deliveries = self.backend._call(self.backend._claim, self.types, self.limit, self.owner, visibility)
        if not deliveries:
            return self.backend._call(self.backend._next, self.types)
        for delivery in deliveries:
            heartbeat.track(delivery, claimed_at)
        run_batch(deliveries, self.handle, self.stop, heartbeat, self.owner)
        return None

    def _maybe_prune(self) -> None:
        if time.monotonic() < self.next_prune:
            return
        self.next_prune = time.monotonic() + PRUNE_EVERY
        try:
            deleted = self.backend.prune()
        except StoreUnavailable as error:
            logger.warning("task worker %s: could not delete old finished tasks: %s", self.owner, error)
            return
        if deleted:
            logger.info("task worker %s: deleted %d finished task(s) older than %s", self.owner, deleted,
                        self.backend.retention)

    def _sleep(self, now_ms: int, next_ms: int | None, answered_at: float) -> bool:
        """Wait until ``next_ms`` (database clock), a sooner wake-up, wake(), ``stop`` or ``max_sleep``.

        True when something may be due now (a known due time came, a wake-up), False after ``max_sleep``
        with nothing known (the caller looks before it claims: an idle look is one read). Shortly before a
        known due time the worker connects (see :meth:`_warm_up`), so that the claim starts at once.
        """
        bound = self.backend.max_sleep
        if self.backend.heard_by and not self.hub.listening.is_set():
            bound = min(bound, UNLISTENED_MAX_SLEEP)
        deadline, due = answered_at + bound, False
        if next_ms is not None:
            wait = (next_ms - now_ms) / 1000
            if wait <= 0:  # due (or expired) already, yet not claimed: another worker holds it for a moment
                wait = BUSY_PAUSE
            if answered_at + wait <= deadline:
                deadline, due = answered_at + wait, True
        inbox = self.inbox
        warmed = False
        while not self.stop.is_set():
            with inbox.cond:
                for message in inbox.take():
                    if message is WAKE:
                        return True
                    due_ms, task_type = message
                    at = answered_at + (due_ms - now_ms) / 1000
                    if (task_type == "*" or task_type in self.type_set) and at <= deadline:
                        deadline, due = at, True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return due
                early = WARM_UP_AHEAD if due and not warmed else 0.0
                if remaining > early:
                    inbox.cond.wait(min(remaining - early, STOP_CHECK_SECONDS))
                    continue
            warmed = True  # outside the lock: a producer posting a wake-up must not wait for the database
            looked = self._warm_up()
            if looked is not None and looked[1] is not None:  # a sooner due time (scheduled elsewhere)
                at = time.monotonic() + max(0, looked[1] - looked[0]) / 1000
                if at < deadline:
                    deadline, due = at, True
        return True

    def _warm_up(self) -> tuple[int, int | None] | None:
        """Open this cycle's connection (and warm the database's caches for the table) ahead of a due time.

        With ``CONN_MAX_AGE = 0`` a cycle starts on a new connection; opening it, and the first queries
        on it (PostgreSQL's catalog caches are per connection), are most of a start's lateness otherwise.
        The cycle that follows keeps this connection (see :meth:`_cycle`).
        """
        try:
            close_old_connections()
            looked = self.backend._next(self.types)
        except Error:
            return None  # the claim reports it
        self.warmed_at = time.monotonic()
        return looked

"""What the three SQL backends (lock store, task backend, task record store) and the run history share about their
database: the ``django://[alias]`` URL, the alias check, one policy for turning database errors into
StoreUnavailable (a missing table or column named as what it is: migrations not applied, with the command that
applies them), and the pruning of old rows (in batches, now and then)."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from django.db import DEFAULT_DB_ALIAS, Error, connections, router, transaction
from django.db.models import Model, QuerySet

from mutexcron.backend_helpers import store_errors
from mutexcron.errors import StoreConfigError, StoreUnavailable
from mutexcron.urls import mask_url, pop_query_options, shown

__all__ = ["NowAndThen", "Pruned", "checked_alias", "delete_in_batches", "drop_broken_connection", "is_retryable",
           "migrate_advice", "migrate_command", "not_migrated", "parse_django_url", "sql_errors"]

DELETE_BATCH = 1000  # ids per DELETE: each statement locks few rows, briefly
MAX_DELETE_BATCHES = 100_000  # one prune deletes at most this many batches (100 million rows)

# A table or column that does not exist, as each database says it: PostgreSQL's SQLSTATE (undefined_table,
# undefined_column), MySQL's and MariaDB's error numbers (ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR), SQLite's message.
_UNDEFINED_SQLSTATES = frozenset({"42P01", "42703"})
_UNDEFINED_MYSQL_ERRORS = frozenset({1146, 1054})
_UNDEFINED_SQLITE = re.compile(r"^(no such table|no such column|table \S+ has no column named)\b")


def checked_alias(using: str | None, model: type[Model], *, url: str | None = None, what: str = "store") -> str:
    """``using`` (default: the router's for writing ``model``) if DATABASES has it; else a StoreConfigError naming
    ``what`` and its ``url`` (masked), or ``django://<alias>`` when the backend was built without a URL."""
    alias = using or router.db_for_write(model)
    if alias not in connections.databases:
        known = ", ".join(sorted(connections.databases))
        named = f"{what} URL {mask_url(url)!r}" if url is not None else mask_url(f"django://{alias}")
        raise StoreConfigError(f"{named}: no database alias {shown(alias)} (DATABASES has {known})")
    return alias


def parse_django_url(url: str, model: type[Model], *, what: str,
                     options: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """The checked alias of a ``django://[alias][?option=…]`` URL (none: the router's for ``model``) and its
    ``options``; a path, a fragment or another option is a StoreConfigError naming ``what`` URL, masked."""
    cleaned, values = pop_query_options(url, options)
    parts = urlsplit(cleaned)
    if parts.query or parts.fragment or parts.path.strip("/"):
        usage = "django://[alias]" + (f"[?{'&'.join(f'{name}=…' for name in options)}]" if options else "")
        raise StoreConfigError(f"malformed {what} URL {mask_url(url)!r}: use {usage}")
    return checked_alias(unquote(parts.netloc) or None, model, url=url, what=what), values


def drop_broken_connection(alias: str) -> None:
    """After an error, close this thread's connection of ``alias`` if it is unusable (or past CONN_MAX_AGE),
    so that the next call opens a new one; never inside the caller's transaction."""
    # Django does that only around requests (close_old_connections). Threads no request cycle cleans up (the
    # scheduler's heartbeat and schedule-sync threads, a producer thread, a broker's consumer) would keep a
    # connection the server terminated (pg_terminate_backend) for good: every lock renewal would fail with
    # "the connection is closed" and the lease run out under the running body (tests/chaos/test_postgres_terminate).
    connection = connections[alias]
    if not connection.in_atomic_block:
        with contextlib.suppress(Exception):  # closing a dead connection may fail too: it is dropped all the same
            connection.close_if_unusable_or_obsolete()


def not_migrated(error: BaseException, alias: str) -> bool:
    """Whether database error ``error`` of ``alias`` says a table or column does not exist: the app's migrations
    are not (all) applied to that database."""
    cause = error.__cause__  # the driver's error, which Django's wraps
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)  # psycopg, psycopg2
    if code is not None:
        return code in _UNDEFINED_SQLSTATES
    vendor = connections[alias].vendor
    if vendor == "mysql":
        return bool(error.args) and error.args[0] in _UNDEFINED_MYSQL_ERRORS
    return vendor == "sqlite" and _UNDEFINED_SQLITE.match(str(error)) is not None


def migrate_command(alias: str) -> str:
    """The command that applies the migrations to database ``alias``."""
    return "manage.py migrate" + ("" if alias == DEFAULT_DB_ALIAS else f" --database {alias}")


def migrate_advice(error: BaseException, alias: str) -> str | None:
    """What database error ``error`` of ``alias`` means if it is a missing table or column (its first line, without
    PostgreSQL's pointer into the query) and the command to run; None for any other error."""
    if not not_migrated(error, alias):
        return None
    lines = str(error).strip().splitlines()
    return (f"mutexcron's tables are missing or out of date ({type(error).__name__}: {lines[0] if lines else ''}); "
            f"run {migrate_command(alias)}")


@contextlib.contextmanager
def sql_errors(alias: str, where: str) -> Iterator[None]:
    """A database error inside the block as StoreUnavailable naming ``where`` and the error's class (a missing
    table or column: the migrate command to run), so that callers fail closed; first, this thread's connection is
    dropped if the error left it unusable."""
    with store_errors(Error, where, name_error=True):
        try:
            yield
        except Error as error:
            drop_broken_connection(alias)
            advice = migrate_advice(error, alias)
            if advice is not None:
                raise StoreUnavailable(f"{where}: {advice}") from error
            raise


def is_retryable(error: BaseException) -> bool:
    """A deadlock, serialization failure, lock wait timeout or a busy SQLite file: worth one more try."""
    cause = error.__cause__ or error
    if getattr(cause, "sqlstate", None) in ("40P01", "40001", "55P03"):
        return True
    args = getattr(cause, "args", ())
    if args and args[0] in (1205, 1213):  # MySQL/MariaDB: lock wait timeout, deadlock
        return True
    return "database is locked" in str(cause)


@dataclass(frozen=True)
class Pruned:
    """What one prune did: rows deleted, and whether it got to the end (not stopped by its time budget)."""

    deleted: int
    complete: bool


def delete_in_batches(rows: QuerySet[Any], *, batch: int = DELETE_BATCH, budget: float | None = None,
                      own_transactions: bool = False) -> Pruned:
    """Delete ``rows``, ``batch`` ids per DELETE (which checks ``rows``' filter again: a row changed meanwhile
    stays), so that no statement holds the table long; with ``own_transactions``, each DELETE in a transaction of
    its own (a savepoint inside a caller's). With ``budget`` (seconds), stop after the batch that exceeds it."""
    deadline = None if budget is None else time.monotonic() + budget
    deleted = 0
    for _ in range(MAX_DELETE_BATCHES):
        ids = list(rows.order_by().values_list("pk", flat=True)[:batch])
        if ids:
            with transaction.atomic(using=rows.db) if own_transactions else contextlib.nullcontext():
                deleted += rows.filter(pk__in=ids).delete()[0]
        if len(ids) < batch:
            break
        if deadline is not None and time.monotonic() >= deadline:
            return Pruned(deleted, complete=False)
    return Pruned(deleted, complete=True)


class NowAndThen:
    """When a process's automatic prune is due: at the first call, then at most once every ``every`` seconds (one
    caller at a time), and again at once after a prune left unfinished."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._next: float | None = None  # time.monotonic() of the next prune; None: the next call
        self._lock = threading.Lock()

    def due(self) -> bool:
        """True if the prune is due now: the caller makes it, and the next is ``every`` seconds away."""
        with self._lock:
            now = time.monotonic()
            if self._next is not None and now < self._next:
                return False
            self._next = now + self.every
            return True

    def again(self) -> None:
        """The prune was left unfinished: the next call goes on with it."""
        with self._lock:
            self._next = None

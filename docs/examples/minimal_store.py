"""A store of the lock contract alone: one SQLite file shared by the processes of one machine.

Plug it in with ``register("lock_store", "sqlite", "docs.examples.minimal_store.SQLiteLockStore")`` (from
mutexcron.plugins) and ``Scheduler("sqlite:///var/lib/myapp/locks.db")``. The clock is ``time.time()`` read under
the file's write lock: the processes share this machine's one clock (SQLite's locking does not hold across
machines), and reading it under the lock orders it with the decisions.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from mutexcron.errors import StoreUnavailable
from mutexcron.stores import AcquireStatus, Acquisition, LockStore

EPOCH, MICRO = datetime(1970, 1, 1, tzinfo=UTC), timedelta(microseconds=1)  # times are integer microseconds
SCHEMA = ("CREATE TABLE IF NOT EXISTS locks (name TEXT PRIMARY KEY, owner TEXT, token INTEGER NOT NULL DEFAULT 0, "
          "locked_us INTEGER NOT NULL DEFAULT 0, until_us INTEGER NOT NULL DEFAULT 0, fire_us INTEGER)")


class SQLiteLockStore(LockStore):
    """One row per job; every call is one BEGIN IMMEDIATE transaction, which holds the file's write lock."""

    @classmethod
    def from_url(cls, url: str) -> SQLiteLockStore:
        return cls(urlsplit(url).path)

    def __init__(self, path: str) -> None:
        self.path = path
        with self._transaction() as db:
            db.execute(SCHEMA)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        try:
            with closing(sqlite3.connect(self.path, timeout=10, isolation_level=None)) as db, db:
                db.execute("BEGIN IMMEDIATE")  # COMMIT at the end of the block, ROLLBACK on an error
                yield db
        except sqlite3.Error as error:
            raise StoreUnavailable(f"SQLite lock store {self.path}: {error}") from error

    def seed(self, names: Iterable[str]) -> int:
        with self._transaction() as db:
            return sum(db.execute("INSERT OR IGNORE INTO locks (name) VALUES (?)", (name,)).rowcount for name in names)

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:  # no control plane: no versions
        fire = None if fire_time is None else (fire_time - EPOCH) // MICRO
        with self._transaction() as db:
            now = time.time_ns() // 1000
            db.execute("INSERT OR IGNORE INTO locks (name) VALUES (?)", (name,))
            holder, token, until, last_fire = db.execute(
                "SELECT owner, token, until_us, fire_us FROM locks WHERE name = ?", (name,)).fetchone()
            if fire is not None and last_fire is not None and last_fire >= fire:
                return Acquisition(AcquireStatus.ALREADY_RAN)
            if until > now:
                return Acquisition(AcquireStatus.BUSY, holder=holder)
            db.execute("UPDATE locks SET owner = ?, token = ?, locked_us = ?, until_us = ?, fire_us = COALESCE(?, "
                       "fire_us) WHERE name = ?", (owner, token + 1, now, now + lease // MICRO, fire, name))
            return Acquisition(AcquireStatus.ACQUIRED, token + 1)

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        with self._transaction() as db:
            now = time.time_ns() // 1000
            return db.execute("UPDATE locks SET until_us = ? WHERE name = ? AND token = ? AND until_us > ?",
                              (now + lease // MICRO, name, token, now)).rowcount == 1

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:  # outcomes serve alerts: not kept
        with self._transaction() as db:
            now = time.time_ns() // 1000
            return db.execute("UPDATE locks SET until_us = MAX(?, locked_us + ?) WHERE name = ? AND token = ? AND "
                              "until_us > ?", (now, hold_at_least // MICRO, name, token, now)).rowcount == 1

    def now(self) -> datetime:
        return EPOCH + time.time_ns() // 1000 * MICRO

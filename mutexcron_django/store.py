"""Locks in the app's own SQL database through Django's ORM: the embedded default (SQLite works).

Acquire is one conditional UPDATE decided on the database's clock (``DbNow()``), then a rowcount check:
no read-modify-write, so concurrent instances cannot both win. A deleted lock keeps its row with
``deleted`` set (a tombstone hidden from readers); seeding or acquiring revives it, token and last fire kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import ParamSpec, TypeVar

from django.db import DatabaseError, IntegrityError, connections, router, transaction
from django.db.models import F, Q, QuerySet

from mutexcron._common import store_errors
from mutexcron.errors import StoreConfigError, StoreUnavailable
from mutexcron.stores.base import AcquireStatus, Acquisition, LockState, LockStore

from .dbclock import AsUTC, DbNow, aware, db_now, now_minus, now_plus, plus
from .models import Lock

UTC = UTC
P = ParamSpec("P")
T = TypeVar("T")


class DjangoLockStore(LockStore):
    """The ``Lock`` model as a lock store; ``using`` picks the database alias (default: the router's)."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using or router.db_for_write(Lock)
        if self.using not in connections.databases:
            known = ", ".join(sorted(connections.databases))
            raise StoreConfigError(f"django://{self.using}: no database alias {self.using!r} (DATABASES has {known})")

    @classmethod
    def from_url(cls, url: str) -> DjangoLockStore:
        """``django://`` or ``django://<database alias>``."""
        alias = url.split("://", 1)[1].strip("/")
        return cls(alias or None)

    @property
    def _locks(self) -> QuerySet[Lock]:
        return Lock.objects.using(self.using)

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with store_errors(DatabaseError, f"database {self.using!r}"):
            return operation(*args, **kwargs)

    def seed(self, names: Iterable[str]) -> int:
        def run() -> int:
            wanted = list(dict.fromkeys(names))
            created = self._locks.filter(name__in=wanted, deleted=True).update(deleted=False)  # revived
            existing = set(self._locks.filter(name__in=wanted).values_list("name", flat=True))
            for name in wanted:
                if name in existing:
                    continue
                try:
                    with transaction.atomic(using=self.using):
                        self._locks.create(name=name)
                    created += 1
                except IntegrityError:  # another instance seeded it a moment ago
                    pass
            return created

        return self._call(run)

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None) -> Acquisition:
        def run() -> Acquisition:
            for _ in range(2):
                free = self._locks.filter(Q(name=name) & (Q(locked=False) | Q(lock_until__lte=DbNow())))
                if fire_time is not None:
                    free = free.filter(Q(last_fire_time__isnull=True) | Q(last_fire_time__lt=fire_time))
                changes = {"locked": True, "locked_by": owner, "last_locked_at": DbNow(), "lock_until": now_plus(lease),
                           "token": F("token") + 1, "deleted": False}
                if fire_time is not None:
                    changes["last_fire_time"] = fire_time
                with transaction.atomic(using=self.using):
                    if free.update(**changes) == 1:
                        return Acquisition(AcquireStatus.ACQUIRED, token=self._locks.get(name=name).token)
                state = (self._locks.filter(name=name)
                         .values("locked_by", "deleted", last_fire=AsUTC("last_fire_time")).first())
                if state is None or state["deleted"]:  # create or revive it, then try once more
                    self.seed([name])
                    continue
                last_fire = aware(state["last_fire"])
                if fire_time is not None and last_fire is not None and last_fire >= fire_time:
                    return Acquisition(AcquireStatus.ALREADY_RAN, holder=state["locked_by"])
                return Acquisition(AcquireStatus.BUSY, holder=state["locked_by"])
            raise StoreUnavailable(f"database {self.using!r}: lock row for {name!r} vanished while acquiring")

        return self._call(run)

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        return self._call(lambda: self._locks.filter(name=name, locked=True, token=token)
                          .update(lock_until=now_plus(lease)) == 1)

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0)) -> bool:
        def run() -> bool:
            mine = self._locks.filter(name=name, locked=True, token=token)
            with transaction.atomic(using=self.using):
                # Still inside hold_at_least: keep it locked until then. Otherwise free it now.
                held = mine.filter(last_locked_at__gt=now_minus(hold_at_least))
                if hold_at_least and held.update(lock_until=plus("last_locked_at", hold_at_least),
                                                 last_released_at=DbNow()) == 1:
                    return True
                return mine.update(locked=False, lock_until=DbNow(), last_released_at=DbNow()) == 1

        return self._call(run)

    def force_unlock(self, name: str) -> bool:
        return self._call(lambda: self._locks.filter(name=name, locked=True)
                          .update(locked=False, lock_until=DbNow(), last_released_at=DbNow()) == 1)

    def delete(self, name: str) -> bool:
        return self._call(lambda: self._locks.filter(name=name, deleted=False).update(deleted=True) == 1)

    def lock(self, name: str) -> LockState | None:
        states = self._call(lambda: _states(self._locks.filter(name=name, deleted=False)))
        return states[0] if states else None

    def locks(self) -> list[LockState]:
        return self._call(lambda: _states(self._locks.filter(deleted=False).order_by("name")))

    def now(self) -> datetime:
        return self._call(db_now, self.using)

    def __repr__(self) -> str:
        return f"<DjangoLockStore database={self.using!r}>"


def _states(rows: QuerySet[Lock]) -> list[LockState]:
    """The rows as lock states, their times read as UTC whatever the session's time zone."""
    values = rows.values("name", "locked", "locked_by", "token", utc_last_locked_at=AsUTC("last_locked_at"),
                         utc_last_released_at=AsUTC("last_released_at"), utc_lock_until=AsUTC("lock_until"),
                         utc_last_fire_time=AsUTC("last_fire_time"))
    return [LockState(name=row["name"], locked=row["locked"], locked_by=row["locked_by"], token=row["token"],
                      last_locked_at=aware(row["utc_last_locked_at"]),
                      last_released_at=aware(row["utc_last_released_at"]),
                      lock_until=aware(row["utc_lock_until"]), last_fire_time=aware(row["utc_last_fire_time"]))
            for row in values]


"""A lock store inside one process: for tests, development and single-instance apps. Every operation is one of
mutexcron.stores.changes applied under a mutex, so this store is also the reference the others follow."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from . import changes
from .base import Acquisition, LockState, LockStore, check_outcome
from .control import ControlStore

__all__ = ["MemoryLockStore"]

T = TypeVar("T")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class MemoryLockStore(LockStore, ControlStore):
    """Locks in a dict guarded by a mutex. ``clock`` replaces the store's clock (tests move time by hand).

    A deleted lock stays in the dict (``deleted`` set), hidden from readers, so its token, last fire time and
    lease survive until a seed or an acquire revives it."""

    def __init__(self, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._clock = clock
        self._mutex = threading.Lock()
        self._locks: dict[str, LockState] = {}

    @classmethod
    def from_url(cls, url: str) -> MemoryLockStore:
        return cls()

    def _apply(self, name: str, change: changes.Change[T]) -> T:
        """``change`` applied to the document of ``name`` under the mutex, its revision bumped if it wrote."""
        with self._mutex:
            state = self._locks.get(name)
            changed, answer = change(state, self._clock())
            if changed is not state and changed is not None:
                revision = state.revision + 1 if state is not None else changed.revision
                self._locks[name] = replace(changed, revision=revision)
            return answer

    def seed(self, names: Iterable[str]) -> int:
        return sum(self._apply(name, changes.revive(name)) for name in dict.fromkeys(names))

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        return self._apply(name, changes.acquire(name, owner=owner, lease=lease, fire_time=fire_time,
                                                 schedule_version=schedule_version))

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        return self._apply(name, changes.renew(token=token, lease=lease))

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        error = check_outcome(outcome, error)
        return self._apply(name, changes.release(token=token, hold_at_least=hold_at_least, outcome=outcome,
                                                 error=error))

    def read(self, name: str) -> LockState | None:
        with self._mutex:
            return self._locks.get(name)

    def locks(self) -> list[LockState]:
        with self._mutex:
            return [state for _, state in sorted(self._locks.items()) if not state.deleted]

    def write(self, state: LockState, *, revision: int) -> bool:
        with self._mutex:
            current = self._locks.get(state.name)
            if (current.revision if current is not None else 0) != revision:
                return False
            self._locks[state.name] = replace(state, revision=revision + 1)
            return True

    def update(self, name: str, change: changes.Change[T]) -> T:
        return self._apply(name, change)  # one step under the mutex: nothing can write between

    def now(self) -> datetime:
        return self._clock()

    def __repr__(self) -> str:
        return f"<MemoryLockStore locks={sum(not state.deleted for state in self._locks.values())}>"

"""Deliberately broken variants of mutexcron, for showing that the nemesis run's checker catches each (``make
nemesis BROKEN=...``). Each is a patch applied in every process of the fleet before it builds anything:

- ``release-any``: a release frees the lock whoever holds it (no token check), as a store that forgot the
  owner check would;
- ``tick-token``: a task worker runs a tick under the tick's own token, without taking the run over (the defect
  of a worker that renews with the tick's token alone: two workers can run one tick at once);
- ``ignore-version``: the scheduler acquires without the schedule version it fired on, so a stale instance runs
  a paused-then-changed or removed schedule's old ticks until its next sync.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

VARIANTS = ("release-any", "tick-token", "ignore-version")


def _release_any() -> None:
    from mutexcron.errors import StoreUnavailable
    from mutexcron.stores import LockStore, ReleaseRequest

    def release(self: Any, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        self.force_unlock(name)
        return True

    def release_many(self: Any, requests: Sequence[ReleaseRequest]) -> list[bool | StoreUnavailable]:
        return [release(self, request.name, token=request.token) for request in requests]

    for store in _store_classes():
        assert issubclass(store, LockStore)
        store.release = release  # type: ignore[method-assign]
        store.release_many = release_many  # type: ignore[method-assign]


def _store_classes() -> list[type]:
    from mutexcron.stores.memory import MemoryLockStore
    from mutexcron.stores.mongo import MongoLockStore
    from mutexcron.stores.redis import RedisLockStore

    classes: list[type] = [MemoryLockStore, MongoLockStore, RedisLockStore]
    from django.conf import settings

    if not settings.configured:  # not on a django:// store
        return classes
    from mutexcron_django.sql.store import DjangoLockStore

    return [*classes, DjangoLockStore]


def _tick_token() -> None:
    from mutexcron.stores import AcquireStatus, Acquisition
    from mutexcron.tasks import job_runs

    class TickToken:
        """A take-over that takes nothing: the tick's token, as if it were this worker's own."""

        def take_over(self, name: str, *, tick_token: int, **_: Any) -> Acquisition:
            return Acquisition(AcquireStatus.ACQUIRED, token=tick_token)

    original = job_runs.JobRunner.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._taker = TickToken()

    job_runs.JobRunner.__init__ = init  # type: ignore[method-assign]


def _ignore_version() -> None:
    from mutexcron.scheduling import fires
    from mutexcron.stores import AcquireRequest

    def request(self: Any, owner: str) -> AcquireRequest:
        return AcquireRequest(self.job.name, owner, self.job.lease, self.tick, None)

    fires.Fire.request = request  # type: ignore[method-assign]


def apply(variant: str | None) -> None:
    """Break this process's mutexcron as ``variant`` says (None: leave it whole)."""
    if variant is None:
        return
    patches = {"release-any": _release_any, "tick-token": _tick_token, "ignore-version": _ignore_version}
    if variant not in patches:
        raise SystemExit(f"unknown broken variant {variant!r}: one of {', '.join(VARIANTS)}")
    patches[variant]()

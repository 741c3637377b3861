"""Fires due at the same instant, their locks asked for together: one round trip per instance and instant on a
store that batches (``LockStore.batches_acquires``), instead of one per job.

APScheduler hands the executor every job due at an instant one after another, in one pass. :class:`FireBatch`
gathers those that come before a worker thread starts the flush (nothing waits to gather them), makes them
:class:`~mutexcron.scheduling.fires.Fire` values there, and :func:`fire_together` runs them with one ``acquire_many``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from .fires import Fire, HandOff, Leave

if TYPE_CHECKING:
    from ..registry import Registry
    from ..stores import LockStore
    from .lifecycle import WorkerPool
    from .options import FireContext
    from .runs import Runs

__all__ = ["FireBatch", "PendingFire", "batched_fires", "fire_together"]

PendingFire = tuple[str, datetime, "int | None", datetime]  # job name, scheduled run time, schedule version, due
MakeFire = Callable[[str, datetime, "int | None", datetime], "Fire | None"]  # LockingExecutor._make
FireMany = Callable[[Sequence[Fire], HandOff], None]


class FireBatch:
    """Fires that APScheduler hands over in one pass go to ``fire_many`` together, from one worker thread: the
    first fire queues the flush, and the fires that come before a worker starts it join it."""

    def __init__(self, pool: WorkerPool, fire_many: FireMany) -> None:
        self._pool = pool
        self._fire_many = fire_many
        self._lock = threading.Lock()
        self._pending: list[tuple[PendingFire, MakeFire, Callable[[], None]]] = []

    def add(self, pending: PendingFire, make: MakeFire, submitted: Callable[[], None]) -> None:
        """Queue ``pending``, made a Fire by ``make`` at the flush; ``submitted()`` once ``fire_many`` has returned
        (or the fire was dropped at shutdown)."""
        with self._lock:
            self._pending.append((pending, make, submitted))
            first = len(self._pending) == 1
        if first and not self._pool.submit(self._flush):
            for *_, dropped in self._take():  # the pool is closed: shutdown drops the fires not started, these too
                dropped()

    def _take(self) -> list[tuple[PendingFire, MakeFire, Callable[[], None]]]:
        with self._lock:
            batch, self._pending = self._pending, []
        return batch

    def _flush(self) -> None:
        batch = self._take()
        try:
            fires = [make(*pending) for pending, make, _ in batch]
            self._fire_many([fire for fire in fires if fire is not None], self._pool.submit)
        finally:
            for *_, submitted in batch:
                submitted()


def batched_fires(store: LockStore, registry: Registry) -> Callable[[str], bool]:
    """Whether a fire of a job joins the others due with it: on a store whose acquire_many is one round trip,
    for a job that does not catch up (a catch-up asks for its missed ticks first, in order, on its own)."""

    def batched(name: str) -> bool:
        if not store.batches_acquires:
            return False
        try:
            return registry.get(name).catch_up == "skip"
        except KeyError:
            return False

    return batched


def fire_together(fires: Sequence[Fire], hand_off: HandOff, *, runs: Runs, fire_context: FireContext) -> None:
    """Fires entered in their generation, with one ``acquire_many``; the bodies and busy locks' patience in
    worker threads, each in a ``fire_context()`` of its own; each fire's ``life.leave()`` once it is over."""
    if not fires:
        return
    entered = [(fire, Leave(fire.life)) for fire in fires]

    def in_fire_context(call: Callable[[], None]) -> bool:
        def run() -> None:
            with fire_context():
                call()

        return hand_off(run)

    try:
        with fire_context():
            runs.execute_many(entered, in_fire_context)
    except BaseException:
        for _, leave in entered:  # an unexpected error: no fire of the batch stays counted in flight
            leave()
        raise

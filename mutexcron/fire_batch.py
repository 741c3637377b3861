"""Fires due at the same instant, their locks asked for together: one round trip per instance and instant on a
store that batches (``LockStore.batches_acquires``), instead of one per job.

APScheduler hands the executor every job due at an instant one after another, in one pass. :class:`FireBatch`
gathers those that come before a worker thread starts the flush (nothing waits to gather them), and
:func:`fire_together` runs them as the scheduler runs one fire, with one ``acquire_many``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .lifecycle import Generation, WorkerPool
    from .registry import Job, Registry
    from .runs import Runs
    from .stores import LockStore

__all__ = ["FireBatch", "FireMany", "HandOff", "PendingFire", "batched_fires", "fire_together"]

PendingFire = tuple[str, datetime, "int | None", datetime]  # job name, scheduled run time, schedule version, due
HandOff = Callable[[Callable[[], None]], bool]  # WorkerPool.submit: False once the pool takes no more calls
FireMany = Callable[[Sequence[PendingFire], HandOff], None]


class FireBatch:
    """Fires that APScheduler hands over in one pass go to ``fire_many`` together, from one worker thread: the
    first fire queues the flush, and the fires that come before a worker starts it join it."""

    def __init__(self, pool: WorkerPool, fire_many: FireMany) -> None:
        self._pool = pool
        self._fire_many = fire_many
        self._lock = threading.Lock()
        self._pending: list[tuple[PendingFire, Callable[[], None]]] = []

    def add(self, fire: PendingFire, submitted: Callable[[], None]) -> None:
        """Queue ``fire``; ``submitted()`` once ``fire_many`` has returned (or the fire was dropped at shutdown)."""
        with self._lock:
            self._pending.append((fire, submitted))
            first = len(self._pending) == 1
        if first and not self._pool.submit(self._flush):
            for _, dropped in self._take():  # the pool is closed: shutdown drops the fires not started, these too
                dropped()

    def _take(self) -> list[tuple[PendingFire, Callable[[], None]]]:
        with self._lock:
            batch, self._pending = self._pending, []
        return batch

    def _flush(self) -> None:
        batch = self._take()
        try:
            self._fire_many([fire for fire, _ in batch], self._pool.submit)
        finally:
            for _, submitted in batch:
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


class _Leave:
    """``life.leave()`` for one fire, once, however often it is called."""

    def __init__(self, life: Generation) -> None:
        self._life = life
        self._lock = threading.Lock()
        self._left = False

    def __call__(self) -> None:
        with self._lock:
            if self._left:
                return
            self._left = True
        self._life.leave()


def fire_together(life: Generation, fires: Sequence[PendingFire], hand_off: HandOff, *,
                  enter: Callable[[str, datetime, datetime], tuple[Job, datetime] | None], runs: Runs,
                  fire_context: Callable[[], AbstractContextManager[Any]]) -> None:
    """Each fire that ``enter`` lets go ahead (as the scheduler's own fires), with one ``acquire_many``; the
    bodies and busy locks' patience in worker threads, each in a ``fire_context()`` of its own."""
    entered = []
    for name, run_time, version, due in fires:
        fire = enter(name, run_time, due)
        if fire is not None:
            entered.append((fire[0], fire[1], version, _Leave(life)))
    if not entered:
        return

    def in_fire_context(call: Callable[[], None]) -> bool:
        def run() -> None:
            with fire_context():
                call()

        return hand_off(run)

    try:
        with fire_context():
            runs.execute_many(life, entered, in_fire_context)
    except BaseException:
        for *_, leave in entered:  # an unexpected error: no fire of the batch stays counted in flight
            leave()
        raise

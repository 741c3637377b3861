"""Fires due at the same instant, their locks asked for together: one round trip per instance and instant on a
store that batches (``LockStore.batches_acquires``), instead of one per job.

APScheduler hands the executor every job due at an instant one after another, in one pass over its due jobs.
:class:`FireBatch` gathers the fires of a pass (:class:`PassingScheduler` says when one begins and ends) and hands
them to one worker thread when it ends; that thread makes them :class:`~mutexcron.scheduling.fires.Fire` values and
:func:`fire_together` runs them with one ``acquire_many``. Gathering until the pass ends costs little lateness: the
pass computes the next fire times of the jobs handed over (tens of microseconds each), and a flush started earlier
would hold a worker thread on a store round trip while the rest of the pass queued behind it for another. A long
pass (thousands of jobs due at once) is flushed every FLUSH_AT fires, so that its first bodies do not wait for
its end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from apscheduler.schedulers.background import BackgroundScheduler

from .fires import DueFire, Fire, HandOff, Leave
from .jobstore import SortedJobStore

if TYPE_CHECKING:
    from ..registry import Job
    from ..stores import LockStore
    from .lifecycle import WorkerPool
    from .options import FireContext
    from .runs import Runs

__all__ = ["FLUSH_AT", "FireBatch", "PassingScheduler", "batched_fires", "fire_together"]

# Fires of one pass sent as soon as there are this many: at 8 instances x 2,000 jobs a pass takes hundreds of ms,
# and gathering all of it put every body behind its end; 500 fires cost a round trip each 500.
FLUSH_AT = 500
MakeFire = Callable[[DueFire], "Fire | None"]  # LockingExecutor._make
FireMany = Callable[[Sequence[Fire], HandOff], None]


class FireBatch:
    """Fires that APScheduler hands over in one pass go to ``fire_many`` together, from one worker thread: the
    flush is queued when the pass ends (outside a pass, with the first fire; in a long pass, at FLUSH_AT fires),
    and takes every fire queued by then."""

    def __init__(self, pool: WorkerPool, fire_many: FireMany) -> None:
        self._pool = pool
        self._fire_many = fire_many
        self._lock = threading.Lock()
        self._pending: list[tuple[DueFire, MakeFire]] = []
        self._passing = False  # inside a pass of the scheduler's loop: the flush waits for its end
        self._queued = False  # a flush is queued that has not taken the pending fires yet

    def add(self, pending: DueFire, make: MakeFire) -> None:
        """Queue ``pending``, made a Fire by ``make`` at the flush (dropped if the pool is closed: shutdown)."""
        with self._lock:
            self._pending.append((pending, make))
            flush = not self._queued and (not self._passing or len(self._pending) >= FLUSH_AT)
            self._queued = self._queued or flush
        if flush:
            self._submit()

    @contextmanager
    def gathering(self) -> Iterator[None]:
        """One pass of the scheduler's loop: the fires added inside go to one flush, queued when it ends."""
        with self._lock:
            self._passing = True
        try:
            yield
        finally:
            with self._lock:
                self._passing = False
                flush = bool(self._pending) and not self._queued
                self._queued = self._queued or flush
            if flush:
                self._submit()

    def _submit(self) -> None:
        if not self._pool.submit(self._flush):
            self._take()  # the pool is closed: shutdown drops the fires not started, these too

    def _take(self) -> list[tuple[DueFire, MakeFire]]:
        with self._lock:
            batch, self._pending, self._queued = self._pending, [], False
        return batch

    def _flush(self) -> None:
        fires = [make(pending) for pending, make in self._take()]
        self._fire_many([fire for fire in fires if fire is not None], self._pool.submit)


class PassingScheduler(BackgroundScheduler):
    """A BackgroundScheduler whose every pass over its due jobs is a :meth:`FireBatch.gathering` of ``batch``, its
    jobs kept in a :class:`~.jobstore.SortedJobStore`.

    APScheduler 3 calls its executor once per due job from ``_process_jobs`` and has no hook at the end of a pass,
    so this wraps that method (APScheduler is pinned below 4, whose scheduler is another design)."""

    def __init__(self, batch: FireBatch, **options: Any) -> None:
        super().__init__(jobstores={"default": SortedJobStore()}, **options)
        self._fire_batch = batch

    def _process_jobs(self) -> float | None:
        with self._fire_batch.gathering():
            wait: float | None = super()._process_jobs()  # type: ignore[misc]  # private: not in the stubs
        return wait


def batched_fires(store: LockStore) -> Callable[[Job], bool]:
    """Whether a fire of a job joins the others due with it: on a store whose acquire_many is one round trip,
    for a job that does not catch up (a catch-up asks for its missed ticks first, in order, on its own)."""

    def batched(job: Job) -> bool:
        return store.batches_acquires and job.catch_up == "skip"

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

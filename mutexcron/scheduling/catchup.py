"""Which jobs this instance still has to catch up (after start, after a store outage), and who runs each job's
catch-up: one thread at a time per job, which also runs, after the missed ticks, the job's own ticks that fired
on this instance meanwhile (handed to it), so that none overtakes a missed tick and no fire holds a worker
thread waiting. What counts as missed is :func:`mutexcron.ops.control.missed_ticks`."""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..registry import Job
    from .fires import Fire
    from .lifecycle import Generation

__all__ = ["CatchUps"]

logger = logging.getLogger("mutexcron.scheduler")

# Run the job's missed ticks before a time (None: up to now), oldest first; the last one asked for (None: none).
RunMissed = Callable[["Generation", "Job", "datetime | None"], "datetime | None"]
RunTick = Callable[["Fire"], object]  # run a fire handed to the catch-up, as an ordinary fire runs


class CatchUps:
    """The jobs due a catch-up, and for each job whose catch-up runs, the ticks handed to it."""

    def __init__(self, run_missed: RunMissed, run_tick: RunTick) -> None:
        self._run_missed, self._run_tick = run_missed, run_tick
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        # A job whose catch-up runs, by generation (one left over from before a restart hands nothing on): the
        # ticks it runs next, in order.
        self._handed: dict[tuple[Generation, str], list[Fire]] = {}

    def mark(self, names: Iterable[str]) -> None:
        """These jobs missed ticks (or may have): catch them up at the next chance."""
        with self._lock:
            self._pending.update(names)

    def pending(self) -> list[str]:
        with self._lock:
            return sorted(self._pending)

    def run(self, life: Generation, job: Job, tick: Fire | None) -> bool:
        """Catch ``job`` up, then run ``tick`` (a fire of the job; None from the pool), in this thread; False if
        it is not due and no catch-up of it runs: the caller runs ``tick`` as an ordinary fire.

        If the job's catch-up already runs in another thread, ``tick`` is handed to it and this returns at
        once. Otherwise the caller becomes the job's catch-up until nothing is left: the missed ticks before
        the first handed tick, then each handed tick once, oldest first (not one the catch-up already asked
        for as missed). Once shutdown began, the handed ticks not started are dropped, like every fire not
        started then."""
        name, key = job.name, (life, job.name)
        with self._lock:
            handed = self._handed.get(key)
            if handed is not None:
                if tick is not None:
                    bisect.insort(handed, tick, key=lambda handed_tick: handed_tick.time)
                return True
            if name not in self._pending:
                return False
            self._handed[key] = [] if tick is None else [tick]
        try:
            self._drain(life, job)
        finally:
            with self._lock:
                dropped = self._handed.pop(key, [])
            if dropped:  # shutdown began (or an error, logged by the worker thread, ended the catch-up)
                logger.warning("job %r: %d tick(s) handed to its catch-up dropped unrun: its catch-up ended",
                               name, len(dropped))
        return True

    def _drain(self, life: Generation, job: Job) -> None:
        """The catch-up's loop, until nothing is missed or handed (or shutdown began). A job marked due again
        meanwhile (a store outage) is caught up again, once between two handed ticks: a store still down
        marks it again at once, and it is caught up when the store is back."""
        name, key = job.name, (life, job.name)
        asked: datetime | None = None  # the newest tick asked for so far
        just_caught_up = False
        while not life.closing.is_set():
            with self._lock:
                handed = self._handed[key]
                while handed and asked is not None and handed[0].time <= asked:
                    handed.pop(0)
                if name in self._pending and not just_caught_up:
                    self._pending.discard(name)
                    before, tick = (handed[0].time if handed else None), None
                elif handed:
                    tick = handed.pop(0)
                else:
                    del self._handed[key]
                    return
            if tick is None:
                newest = self._run_missed(life, job, before)
                asked = newest if asked is None or (newest is not None and newest > asked) else asked
            else:
                self._run_tick(tick)
                asked = tick.time
            just_caught_up = tick is None

"""Fires that found their lock busy, asking again while their patience lasts: one worker thread for the busy fires
of one batch, one ``acquire_many`` a round.

Several ticks of one job may wait on one instance at once (a dead holder's lease outlasts a tick). Only the
earliest of them asks: if a later tick took the lock first, the store would count the earlier one as already run
and it would be skipped, although it is the one that waited longest. A later tick, on its first ask as on each
round, is answered busy without asking until the earlier one is decided.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..errors import StoreUnavailable
from ..records import RunRecord
from ..stores import AcquireStatus, Acquisition, LockStore
from .fires import Fire

__all__ = ["BusyWaits", "Waiting"]


def _nothing(record: RunRecord | None) -> None:
    return None


@dataclass
class Waiting:
    """A fire that found its lock busy, asking again while its patience lasts (:meth:`BusyWaits.ask_again`)."""

    fire: Fire
    acquisition: Acquisition
    deadline: float  # time.monotonic() when its patience ends
    done: Callable[[RunRecord | None], None] = _nothing  # once it is over, with its record
    error: StoreUnavailable | None = None
    concluded: bool = False  # handed to conclude() (once, whatever goes wrong)

    def waits(self, now: float) -> bool:
        """Still to ask again: busy, no store error, patience left."""
        return self.error is None and self.acquisition.status is AcquireStatus.BUSY and now < self.deadline


class BusyWaits:
    """The busy fires of one scheduler asking again, each job's ticks in order (the earliest waiting tick asks)."""

    def __init__(self, store: LockStore, owner: Callable[[], str]) -> None:
        self._store, self._owner = store, owner
        self._lock = threading.Lock()
        self._ticks: dict[str, Counter[datetime]] = {}  # job name: the ticks of its fires waiting here

    def ask_again(self, waiting: list[Waiting], conclude: Callable[[Waiting], None]) -> None:
        """Ask again for busy fires (of one generation), together (one ``acquire_many`` a round), backing off from
        20 ms to 1 s, while each is busy and within its patience; ``conclude(fire)`` once for each, when decided
        or when the wait ends (shutdown began, or an unexpected error)."""
        self._enter(waiting)

        def settle(busy: Waiting) -> None:
            busy.concluded = True
            self._leave(busy)
            conclude(busy)

        closing = waiting[0].fire.life.closing
        pause = 0.02
        try:
            while True:
                now = time.monotonic()
                for busy in [busy for busy in waiting if not busy.waits(now)]:
                    settle(busy)
                waiting = [busy for busy in waiting if not busy.concluded]
                if not waiting or closing.wait(min(pause, max(0.0, min(w.deadline for w in waiting) - now))):
                    break
                pause = min(pause * 2, 1.0)
                answers = self.ask([busy.fire for busy in waiting])
                for busy, answer in zip(waiting, answers, strict=True):
                    if isinstance(answer, StoreUnavailable):
                        busy.error = answer  # decided: recorded as the fire's outcome
                    else:
                        busy.acquisition = answer
        finally:
            for busy in waiting:
                if not busy.concluded:
                    settle(busy)

    def ask(self, fires: Sequence[Fire]) -> list[Acquisition | StoreUnavailable]:
        """The store's ``acquire_many`` answers for ``fires``, but a fire that an earlier tick of its job waits ahead
        of here is answered busy without being asked."""
        answers = [self.behind(fire) for fire in fires]
        asked = [fire.request(self._owner()) for fire, answer in zip(fires, answers, strict=True) if answer is None]
        replies = iter(self._store.acquire_many(asked) if asked else [])
        return [next(replies) if answer is None else answer for answer in answers]

    def behind(self, fire: Fire) -> Acquisition | None:
        """BUSY if an earlier tick of ``fire``'s job waits here (a manual run or backfill, which has no tick, is
        never behind), else None."""
        tick = fire.tick
        if tick is None or not self._ticks:  # nothing waits: the usual case, read without the lock
            return None
        with self._lock:
            ticks = self._ticks.get(fire.job.name)
            earliest = min(ticks) if ticks else None
        return Acquisition(AcquireStatus.BUSY) if earliest is not None and earliest < tick else None

    def _enter(self, waiting: list[Waiting]) -> None:
        with self._lock:
            for busy in waiting:
                if busy.fire.tick is not None:
                    self._ticks.setdefault(busy.fire.job.name, Counter())[busy.fire.tick] += 1

    def _leave(self, busy: Waiting) -> None:
        tick, name = busy.fire.tick, busy.fire.job.name
        if tick is None:
            return
        with self._lock:
            ticks = self._ticks[name]
            ticks[tick] -= 1
            if ticks[tick] <= 0:
                del ticks[tick]
            if not ticks:
                del self._ticks[name]

"""Which jobs this instance still has to catch up (after start, after a store outage), and one lock per job
that its catch-up holds while the job's own fires on this instance wait, so that none overtakes a missed
tick. What counts as missed is :func:`mutexcron.control.missed_ticks`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

__all__ = ["CatchUps"]


class CatchUps:
    """The jobs due a catch-up, and the per-job locks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._running: dict[str, threading.Lock] = {}

    def mark(self, names: Iterable[str]) -> None:
        """These jobs missed ticks (or may have): catch them up at the next chance."""
        with self._lock:
            self._pending.update(names)

    def pending(self) -> list[str]:
        with self._lock:
            return sorted(self._pending)

    def run(self, name: str, closing: threading.Event, catch_up: Callable[[], None]) -> None:
        """If ``name`` is due, call ``catch_up()`` under the job's lock (waiting for one in progress, unless
        ``closing`` is set). A store outage meanwhile marks it due again (the scheduler's StoreHealth)."""
        with self._lock:
            lock = self._running.setdefault(name, threading.Lock())
        while not lock.acquire(timeout=0.2):
            if closing.is_set():
                return
        try:
            with self._lock:
                if name not in self._pending:
                    return
                self._pending.discard(name)
            catch_up()
        finally:
            lock.release()

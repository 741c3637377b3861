"""The lock store's health as one scheduler sees it: one error when it goes away and one line when it is
back (with how many fires it skipped meanwhile), not one per tick."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from ..errors import StoreUnavailable

__all__ = ["StoreHealth"]

logger = logging.getLogger("mutexcron.scheduler")


class StoreHealth:
    """Calls ``on_down()`` at every failure and ``on_back()`` once when the store answers again."""

    def __init__(self, on_down: Callable[[], None], on_back: Callable[[], None]) -> None:
        self._on_down, self._on_back = on_down, on_back
        self._lock = threading.Lock()
        self._down_since: datetime | None = None
        self._skipped = 0

    def failed(self, error: StoreUnavailable) -> None:
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = datetime.now(UTC)
                self._skipped = 0
        self._on_down()
        if first:
            logger.error("lock store unreachable; jobs are skipped until it returns: %s", error)
        else:
            logger.debug("lock store still unreachable: %s", error)

    def skipped(self) -> None:
        """A fire was skipped because the store could not be reached."""
        with self._lock:
            self._skipped += 1

    def ok(self) -> None:
        with self._lock:
            since, self._down_since = self._down_since, None
            skipped = self._skipped
        if since is not None:
            logger.warning("lock store reachable again after %s; %d fire(s) were skipped meanwhile",
                           datetime.now(UTC) - since, skipped)
            self._on_back()

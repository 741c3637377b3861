"""A task worker whose store is unreachable waits for it, as the scheduler does: one log line when the outage
begins (also when the worker starts with the store down), one when it ends, and retries in between."""

from __future__ import annotations

import logging
import time

from ...errors import StoreUnavailable

__all__ = ["WorkerOutage"]

logger = logging.getLogger("mutexcron.tasks")


class WorkerOutage:
    """The store outage (if any) of one consume() call: an error logged when it begins, a warning when it ends,
    and in between only debug lines, however often the worker tries again."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._since: float | None = None  # time.monotonic() of the first failure of the current outage
        self._failures = 0

    @property
    def failures(self) -> int:
        """Failed tries in a row: 0 while the store answers."""
        return self._failures

    def failed(self, error: StoreUnavailable, retry_in: float) -> None:
        """A try failed; the caller waits ``retry_in`` seconds before the next."""
        self._failures += 1
        if self._since is None:
            self._since = time.monotonic()
            logger.error("task worker %s: task store unreachable; no task runs until it returns, the worker "
                         "tries again meanwhile: %s", self.worker, error)
        else:
            logger.debug("task worker %s: task store still unreachable, trying again in %.1fs: %s", self.worker,
                         retry_in, error)

    def answered(self) -> None:
        """The store answered: ends the outage (logged once) if there was one."""
        since, self._since = self._since, None
        self._failures = 0
        if since is not None:
            logger.warning("task worker %s: task store reachable again after %.1fs; running tasks", self.worker,
                           time.monotonic() - since)

"""Dead man's switch pings (healthchecks.io, Cronitor): after each run this instance ran, GET the job's
``ping_url`` on success and ``ping_url + "/fail"`` on failure, from one background thread, so that a slow or
dead ping server never delays a run or the lock's release. A failing ping is logged once per outage."""

from __future__ import annotations

import logging
import queue
import threading
import time
import urllib.request
from urllib.error import HTTPError, URLError

from .records import Outcome, RunRecord
from .urls import mask_url

__all__ = ["PING_TIMEOUT", "Pings"]

logger = logging.getLogger("mutexcron.pings")
PING_TIMEOUT = 5.0  # seconds, for the connection and the answer


def ping_target(url: str, outcome: Outcome) -> str:
    """The URL to GET after a run that ended with ``outcome`` (succeeded: the URL; failed: ``/fail``)."""
    return url if outcome is Outcome.SUCCEEDED else url + "/fail"


class Pings:
    """One daemon thread sending the pings queued by :meth:`send`, each with a 5 s timeout, in order."""

    def __init__(self, timeout: float = PING_TIMEOUT) -> None:
        self._timeout = timeout
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._failing = False  # logged once per outage, like the store's

    def send(self, url: str | None, record: RunRecord) -> None:
        """Queue the ping for a run that this instance ran (nothing for a skip, or a job without a URL)."""
        if url is None or record.outcome is None or not record.outcome.ran:
            return
        with self._lock:
            if self._stopped:
                return
            self._queue.put(ping_target(url, record.outcome))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mutexcron-ping", daemon=True)
                self._thread.start()

    def stop(self, deadline: float) -> bool:
        """Send what is queued until the monotonic ``deadline``, then stop; False if a ping is still hanging."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        if thread is None:
            return True
        self._queue.put(None)
        thread.join(max(0.0, deadline - time.monotonic()))
        return not thread.is_alive()

    def _run(self) -> None:
        while (url := self._queue.get()) is not None:
            self._ping(url)

    def _ping(self, url: str) -> None:
        request = urllib.request.Request(url, method="GET", headers={"User-Agent": "mutexcron"})
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                response.read(1024)
        except (HTTPError, URLError, OSError, ValueError) as error:
            if not self._failing:
                self._failing = True
                logger.warning("ping %s failed (further failures are logged at debug level until one works): %s",
                               mask_url(url), error)
            else:
                logger.debug("ping %s failed: %s", mask_url(url), error)
            return
        if self._failing:
            self._failing = False
            logger.info("pings work again (%s)", mask_url(url))

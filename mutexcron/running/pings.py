"""Dead man's switch pings (healthchecks.io, Cronitor): after each run this instance ran, GET the job's
``ping_url`` on success and the URL with ``/fail`` after its path on failure (:func:`~.ping_urls.ping_target`),
from background threads, so that a slow or dead ping server never delays a run or the lock's release.

Nothing here is unbounded: each ping has a total deadline (``Scheduler(ping_timeout=...)``, name resolution and
redirects included: :mod:`mutexcron.running.ping_http`); each host has a queue of at most :data:`MAX_QUEUED` pings, the
oldest dropped first; pings of different hosts go out side by side, one sender thread per host and at most
:data:`MAX_SENDERS`, so that one slow endpoint holds only its own pings. Failures are logged once per outage of
a host, drops once per incident, URLs always masked (:func:`~mutexcron.ping_urls.mask_ping_url`).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ping_urls import PingKind, mask_ping_url, ping_origin, ping_target
from ..records import Outcome, RunRecord
from .ping_http import PingRequest

__all__ = ["MAX_QUEUED", "MAX_SENDERS", "PING_TIMEOUT", "Pings"]

logger = logging.getLogger("mutexcron.pings")
PING_TIMEOUT = 10.0  # seconds for a whole ping (resolution, connection, redirects, answer); Scheduler(ping_timeout=)
# Pings waiting per host: a dead endpoint at its deadline per ping falls behind a busy schedule, and only the
# latest pings matter to a dead man's switch; the oldest are dropped (and counted) beyond this.
MAX_QUEUED = 100
MAX_SENDERS = 8  # hosts pinged side by side; the pings of a ninth host wait for a free sender


@dataclass
class _Host:
    """The pings waiting for one ``scheme://host:port`` and what is known about it."""

    origin: str  # ping_origin(): how the host is shown (and counted in mutexcron_pings_dropped_total)
    queue: deque[tuple[str, PingKind]] = field(default_factory=deque)
    served: bool = False  # a sender thread is sending its pings
    dropped: int = 0  # pings dropped since its queue became full (one incident); 0 once it drains
    failing: bool = False  # logged once per outage
    request: PingRequest | None = None  # the last request, perhaps abandoned and still resolving


class Pings:
    """The pings of one scheduler generation, queued by :meth:`send` and sent by up to ``max_senders`` daemon
    threads (``mutexcron-ping``), one host each, in order per host. ``dropped(origin)`` is called for each ping
    dropped from a full queue (``mutexcron_pings_dropped_total``); ``context`` is the TLS context (None: the
    system's default verification)."""

    def __init__(self, timeout: float = PING_TIMEOUT, *, dropped: Callable[[str], None] | None = None,
                 max_queued: int = MAX_QUEUED, max_senders: int = MAX_SENDERS,
                 context: ssl.SSLContext | None = None) -> None:
        self._timeout = timeout
        self._dropped = dropped
        self._max_queued = max_queued
        self._max_senders = max_senders
        self._context = context
        self._lock = threading.Lock()
        self._hosts: dict[str, _Host] = {}
        self._senders: list[threading.Thread] = []
        self._stop_at: float | None = None  # time.monotonic() once stopping: queued pings go out until then

    def send(self, url: str | None, record: RunRecord) -> None:
        """Queue the ping for a run that this instance ran (nothing for a skip, a replaced run, or a job without a
        URL)."""
        if url is None or record.outcome is None or not record.outcome.ran or record.outcome is Outcome.REPLACED:
            return  # a replaced run ends no check: the run that replaces it sends its own start
        self.ping(url, "success" if record.outcome is Outcome.SUCCEEDED else "fail")

    def ping(self, url: str, kind: PingKind) -> None:
        """Queue a ``kind`` ping of the job's ``url`` (``"start"`` for a run about to begin)."""
        origin = ping_origin(url)
        with self._lock:
            if self._stop_at is not None:
                return
            host = self._hosts.get(origin)
            if host is None:
                host = self._hosts[origin] = _Host(origin)
            dropped = len(host.queue) >= self._max_queued
            if dropped:
                host.queue.popleft()
                host.dropped += 1
                if host.dropped == 1:
                    logger.warning("pings to %s: %d are waiting, dropping the oldest (logged once until the queue "
                                   "drains; counted in mutexcron_pings_dropped_total)", origin, self._max_queued)
            host.queue.append((ping_target(url, kind), kind))
            if not host.served and len(self._senders) < self._max_senders:
                self._start_sender(host)
        if dropped and self._dropped is not None:
            self._dropped(origin)

    def stop(self, deadline: float) -> bool:
        """Send what is queued until the monotonic ``deadline``, then abandon what is left; False if a sender
        is still running then (a request still resolving a host's name)."""
        with self._lock:
            self._stop_at = deadline
            senders = list(self._senders)
        for sender in senders:
            sender.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            requests = [host.request for host in self._hosts.values() if host.request is not None]
            senders = list(self._senders)
        for request in requests:
            request.abandon()
        for sender in senders:
            sender.join(0.1)  # a sender wakes at once from an abandoned request
        return not any(sender.is_alive() for sender in senders)

    # -- the sender threads ------------------------------------------------------------------------

    def _start_sender(self, host: _Host) -> None:
        """Under the lock: a new sender thread, for ``host`` first."""
        host.served = True
        sender = threading.Thread(target=self._serve, args=(host,), name="mutexcron-ping", daemon=True)
        self._senders.append(sender)
        sender.start()

    def _serve(self, host: _Host) -> None:
        """Send ``host``'s pings in order, then those of any other host no sender serves; end when none is left."""
        while True:
            with self._lock:
                stopped = self._stop_at is not None and time.monotonic() >= self._stop_at
                if host.queue and not stopped:
                    target, kind = host.queue.popleft()
                else:
                    next_host = self._release(host, stopped)
                    if next_host is None:
                        self._senders.remove(threading.current_thread())
                        return
                    host = next_host
                    continue
            self._send(host, target, kind)

    def _release(self, host: _Host, stopped: bool) -> _Host | None:
        """Under the lock: ``host`` has no sender any more (its queue is empty, or dropped at the end of a
        stop); the next host waiting for a sender, now served, or None."""
        host.served = False
        if stopped:
            host.queue.clear()
        if host.dropped and not host.queue:
            logger.info("pings to %s: the queue drained; %d ping(s) were dropped", host.origin, host.dropped)
            host.dropped = 0
        waiting = next((other for other in self._hosts.values() if other.queue and not other.served), None)
        if waiting is not None and not stopped:
            waiting.served = True
            return waiting
        return None

    def _send(self, host: _Host, target: str, kind: PingKind) -> None:
        timeout = self._timeout
        if self._stop_at is not None:
            timeout = min(timeout, self._stop_at - time.monotonic())
        previous = host.request
        if previous is not None and previous.thread.is_alive():  # abandoned while resolving: one at a time
            previous.thread.join(max(0.0, timeout))
        if previous is not None and previous.thread.is_alive():
            error: str | None = "the previous ping to this host is still resolving its name"
        else:
            request = host.request = PingRequest(target, timeout, self._context)
            error = request.start().wait()
        self._report(host, kind, mask_ping_url(target), error)

    def _report(self, host: _Host, kind: PingKind, shown: str, error: str | None) -> None:
        if error is None:
            if host.failing:
                host.failing = False
                logger.info("pings to %s work again", host.origin)
            return
        if not host.failing:
            host.failing = True
            logger.warning("%s ping %s failed (further failures of this host are logged at debug level until one "
                           "works): %s", kind, shown, error)
        else:
            logger.debug("%s ping %s failed: %s", kind, shown, error)

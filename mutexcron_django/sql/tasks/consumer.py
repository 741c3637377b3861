"""One consume() call of the ``django://`` task backend: claim due rows, run them, and sleep until something
may be due (a known due time, a wake-up, or ``max_sleep``); and the deliveries it hands to the handler,
which settle their row themselves (see ``docs/sql-tasks.md``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from django.db import Error, close_old_connections, connections

from mutexcron.backend_helpers import clip_error, epoch_ms
from mutexcron.errors import StoreUnavailable
from mutexcron.tasks.backends.base import (
    ClaimedDelivery,
    ClaimHeartbeat,
    ClaimingConsumer,
    ConsumeRequest,
    run_batch,
)

from ...models import ScheduledTask
from ..clock import DbNow, now_plus
from ..databases import NowAndThen
from .claims import TaskClaims
from .wakeups import UNLISTENED_MAX_SLEEP, WAKE, Inbox, hub

logger = logging.getLogger("mutexcron.tasks.django")

PRUNE_EVERY = 3600.0  # seconds between two deletions of old finished tasks by one worker
STOP_CHECK_SECONDS = 0.25  # a waiting worker notices a set ``stop`` within this, even without wake()
BUSY_PAUSE = 0.005  # seconds: due tasks exist but another worker holds them (for a few ms)
WARM_UP_AHEAD = 0.05  # seconds: a sleeping worker connects this long before a known due time

Status = ScheduledTask.Status


class ClaimingTable(Protocol):
    """What a consumer uses of its backend (``backend.DjangoTaskBackend``): its alias, claim queries and settings,
    and the one claim and one read a cycle makes (the tests count them on the backend). Declared here so that this
    module needs nothing of the backend's."""

    using: str
    claims: TaskClaims
    heard_by: str | None  # how this process's workers hear of other processes' changes (None: they do not)
    max_sleep: float  # seconds
    retention: timedelta

    def claim_batch(self, types: list[str], limit: int, owner: str,
                    visibility: dict[str, timedelta]) -> list[DjangoDelivery]: ...

    def next_due(self, types: list[str]) -> tuple[int, int | None]: ...

    def prune(self) -> int: ...


@dataclass(eq=False)
class DjangoDelivery(ClaimedDelivery):
    """A claimed task; ``token`` (the claim's) proves the claim is still this worker's. It settles its row
    itself, through the backend's :class:`~.claims.TaskClaims`."""

    claims: TaskClaims
    id: str
    task_type: str
    payload: str
    attempt: int
    token: str
    visibility: timedelta
    heartbeat: _Heartbeat | None = field(default=None, repr=False)
    due: datetime | None = None
    trace_context: Mapping[str, str] | None = field(default=None, repr=False)

    @property
    def visibility_seconds(self) -> float:
        return self.visibility.total_seconds()

    def ack(self) -> None:
        self._settle("ack", status=Status.SUCCEEDED, finished_at=DbNow())

    def retry_later(self, delay: timedelta, error: str) -> None:
        delay = max(delay, timedelta(0))
        wake = (epoch_ms(datetime.now(UTC) + delay), self.task_type)
        self._settle("schedule a retry of", wake, status=Status.SCHEDULED, due=now_plus(delay), claim_token=None,
                     error=clip_error(error))

    def fail(self, error: str) -> None:
        self._settle("fail", status=Status.FAILED, error=clip_error(error), finished_at=DbNow())

    def release(self) -> None:
        """Give the task back unrun (the worker is stopping): due again at once, this attempt not counted."""
        self.settle("release", lambda: self.claims.run(self.claims.release, self))

    def _settle(self, what: str, wake: tuple[int, str] | None = None, **changes: Any) -> None:
        self.settle(what, lambda: self.claims.run(self.claims.settle, self, wake, **changes))


class _Heartbeat(ClaimHeartbeat[DjangoDelivery]):
    """Extends the claims due for it with one UPDATE per round (see :class:`ClaimHeartbeat`), then closes
    its database connection: heartbeats are rare (every few minutes with the default timeout)."""

    def __init__(self, claims: TaskClaims) -> None:
        self.claims = claims
        super().__init__()

    def extend(self, batch: list[DjangoDelivery]) -> set[DjangoDelivery]:
        return self.claims.run(self.claims.extend, batch)

    def round_done(self) -> None:
        connections[self.claims.using].close()


class DjangoConsumer(ClaimingConsumer):
    """One consume() call: claim, run, and sleep until something may be due (or a wake-up).

    It claims and looks through the backend's ``claim_batch`` and ``next_due`` (one claim, one read each).
    """

    def __init__(self, backend: ClaimingTable, request: ConsumeRequest) -> None:
        super().__init__(request)
        self.backend = backend
        self.claims = backend.claims
        self.inbox = Inbox()
        self.hub = hub(backend.using)
        self.prunes = NowAndThen(PRUNE_EVERY)
        self.warmed_at: float | None = None

    def wake(self) -> None:
        """Make this consumer, if it is waiting, look again now."""
        self.inbox.put(WAKE)

    def run(self) -> None:
        self.hub.subscribe(self.inbox, wake=self.backend.heard_by)
        heartbeat = _Heartbeat(self.claims)
        try:
            self._loop(heartbeat)
        finally:
            heartbeat.close()
            self.hub.unsubscribe(self.inbox)
            # This thread's connections (Django's are per thread): all of them in a worker thread, which
            # ends with this call; only ours in the main thread (run_worker() in a command), not the app's.
            if threading.current_thread() is threading.main_thread():
                connections[self.backend.using].close()
            else:
                connections.close_all()

    @contextlib.contextmanager
    def _cycle(self) -> Iterator[None]:
        """close_old_connections() before and after (as around a request), except that a connection
        opened for this cycle by :meth:`_warm_up` a moment ago is kept for it."""
        if self.warmed_at is None or time.monotonic() - self.warmed_at > WARM_UP_AHEAD + 1.0:
            close_old_connections()
        self.warmed_at = None
        try:
            yield
        finally:
            close_old_connections()

    def _loop(self, heartbeat: _Heartbeat) -> None:
        look_first = False  # after an idle wake-up (max_sleep): one read, and a claim only if something is due
        while not self.stop.is_set():
            with self.inbox.cond:
                self.inbox.take()  # what the claim or look about to run sees anyway
            claimed_at = time.monotonic()
            next_due: tuple[int, int | None] | None = None
            try:
                with self._cycle():
                    if look_first:
                        next_due = self.claims.run(self.backend.next_due, self.types)
                        now_ms, next_ms = next_due
                        if next_ms is not None and next_ms <= now_ms:
                            next_due = None  # due now: claim
                    if next_due is None:
                        next_due = self._claim_and_run(heartbeat, claimed_at)
                    self._maybe_prune()
            except StoreUnavailable as error:
                self.store_failed(error)  # logged once per outage; a database down when the worker starts too
                look_first = False
                continue
            self.store_answered()
            look_first = next_due is not None and not self._sleep(*next_due, time.monotonic())

    def _claim_and_run(self, heartbeat: _Heartbeat, claimed_at: float) -> tuple[int, int | None] | None:
        """Claim and run a batch (then None: look again at once), or, if none was due, when to look again."""
        visibility = {t: self.visibility_timeout(t) for t in self.types}
        deliveries = self.claims.run(self.backend.claim_batch, self.types, self.limit, self.owner, visibility)
        if not deliveries:
            return self.claims.run(self.backend.next_due, self.types)
        for delivery in deliveries:
            heartbeat.track(delivery, claimed_at)
        run_batch(deliveries, self.handle, self.stop, heartbeat, self.owner)
        return None

    def _maybe_prune(self) -> None:
        if not self.prunes.due():
            return
        try:
            deleted = self.backend.prune()
        except StoreUnavailable as error:
            logger.warning("task worker %s: could not delete old finished tasks: %s", self.owner, error)
            return
        if deleted:
            logger.info("task worker %s: deleted %d finished task(s) older than %s", self.owner, deleted,
                        self.backend.retention)

    def _sleep(self, now_ms: int, next_ms: int | None, answered_at: float) -> bool:
        """Wait until ``next_ms`` (database clock), a sooner wake-up, wake(), ``stop`` or ``max_sleep``.

        True when something may be due now (a known due time came, a wake-up), False after ``max_sleep``
        with nothing known (the caller looks before it claims: an idle look is one read). Shortly before a
        known due time the worker connects (see :meth:`_warm_up`), so that the claim starts at once.
        """
        bound = self.backend.max_sleep
        if self.backend.heard_by and not self.hub.listening.is_set():
            bound = min(bound, UNLISTENED_MAX_SLEEP)
        deadline, due = answered_at + bound, False
        if next_ms is not None:
            wait = (next_ms - now_ms) / 1000
            if wait <= 0:  # due (or expired) already, yet not claimed: another worker holds it for a moment
                wait = BUSY_PAUSE
            if answered_at + wait <= deadline:
                deadline, due = answered_at + wait, True
        inbox = self.inbox
        warmed = False
        while not self.stop.is_set():
            with inbox.cond:
                for message in inbox.take():
                    if message is WAKE:
                        return True
                    due_ms, task_type = message
                    at = answered_at + (due_ms - now_ms) / 1000
                    if (task_type == "*" or task_type in self.type_set) and at <= deadline:
                        deadline, due = at, True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return due
                early = WARM_UP_AHEAD if due and not warmed else 0.0
                if remaining > early:
                    inbox.cond.wait(min(remaining - early, STOP_CHECK_SECONDS))
                    continue
            warmed = True  # outside the lock: a producer posting a wake-up must not wait for the database
            looked = self._warm_up()
            if looked is not None and looked[1] is not None:  # a sooner due time (scheduled elsewhere)
                at = time.monotonic() + max(0, looked[1] - looked[0]) / 1000
                if at < deadline:
                    deadline, due = at, True
        return True

    def _warm_up(self) -> tuple[int, int | None] | None:
        """Open this cycle's connection (and warm the database's caches for the table) ahead of a due time.

        With ``CONN_MAX_AGE = 0`` a cycle starts on a new connection; opening it, and the first queries
        on it (PostgreSQL's catalog caches are per connection), are most of a start's lateness otherwise.
        The cycle that follows keeps this connection (see :meth:`_cycle`).
        """
        try:
            close_old_connections()
            looked = self.backend.next_due(self.types)
        except Error:
            return None  # the claim reports it
        self.warmed_at = time.monotonic()
        return looked

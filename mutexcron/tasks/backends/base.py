"""The task backend contract: where delayed tasks wait, and how workers receive them.

Each backend keeps a task's record (status, attempts, error) and hands due tasks to workers as
:class:`Delivery` objects, at least once: a delivery that is neither acked nor failed (its worker
died) comes back after the handler's visibility timeout. Backends never poll at a fixed interval:
a worker sleeps until the earliest due time and is woken early when a sooner task arrives.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar, cast

from ...errors import StoreUnavailable
from ..handlers import validate_task_type
from ..model import NewTask, TaskInfo, TaskStatus, UnknownTaskType
from .outage import WorkerOutage

if TYPE_CHECKING:
    from ..records.base import TaskRecordStore

__all__ = ["ClaimHeartbeat", "ClaimedDelivery", "ClaimingBackend", "ClaimingConsumer", "ConsumeRequest", "Delivery",
           "RunningConsumers", "TaskBackend", "consumed_types", "run_batch", "warn_stale_settle"]

logger = logging.getLogger("mutexcron.tasks")


class Delivery(ABC):
    """One due task handed to a worker; exactly one of ack / retry_later / fail / release must be called."""

    id: str
    task_type: str
    payload: str  # JSON text
    attempt: int  # 1 for the first try
    due: datetime | None = None  # when this attempt became due: the task's run_at, a retry's time after a failure
    # The carrier of the W3C trace context current at schedule() (decode_trace_context of what NewTask gave),
    # or None: the worker's span of the task is a child of that span.
    trace_context: Mapping[str, str] | None = None
    # What keeps the task this worker's while its handler runs: for a claiming backend (Redis, SQL) the
    # ClaimHeartbeat that extends the claim before its visibility deadline (set by ClaimHeartbeat.track).
    # None for a RabbitMQ delivery, which has no deadline to extend: the broker keeps an unacked message its
    # consumer's for as long as that consumer's connection lives, and the connection's own AMQP heartbeats
    # (sent by its I/O thread, whatever the handler does) keep the connection alive.
    heartbeat: ClaimHeartbeat[Any] | None = None

    @abstractmethod
    def ack(self) -> None:
        """The handler succeeded: the task is done."""

    @abstractmethod
    def retry_later(self, delay: timedelta, error: str) -> None:
        """The handler failed and may be tried again after ``delay``."""

    @abstractmethod
    def fail(self, error: str) -> None:
        """The handler failed for the last time: keep the task as failed (retryable by hand)."""

    @abstractmethod
    def release(self) -> None:
        """The handler was not run (the worker is stopping): give the task back, to run again."""


class TaskBackend(ABC):
    """Where tasks wait. Every method raises :class:`~mutexcron.errors.StoreUnavailable` on connection errors."""

    # True for a backend whose workers refresh the application's database connections around each task
    # themselves (the Django SQL backend), so the framework integration need not wrap handlers for it.
    manages_connections: ClassVar[bool] = False
    # True for a backend whose broker cannot look a waiting message up (RabbitMQ): its from_url() needs a
    # ``cancel_store`` (a TaskRecordStore) for the task records, so the settings require one for its scheme.
    needs_record_store: ClassVar[bool] = False
    # The application database (a Django alias) whose mutexcron tables hold this backend's tasks, or None
    # (another server): which rows the framework's admin pages show and may act on, without isinstance.
    database_alias: str | None = None

    @abstractmethod
    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        """Store ``tasks`` atomically per task (a batch may be split); each is due at its ``run_at``."""

    @abstractmethod
    def cancel(self, task_id: str) -> bool:
        """True if the task will now never start; False if it started, finished, or is unknown."""

    @abstractmethod
    def info(self, task_id: str) -> TaskInfo | None:
        """The task's record, or None if unknown."""

    def status(self, task_id: str) -> TaskStatus:
        found = self.info(task_id)
        return found.status if found is not None else TaskStatus.UNKNOWN

    @abstractmethod
    def retry(self, task_id: str) -> bool:
        """Schedule a failed task to run again now (attempts start over). False if it is not failed."""

    @abstractmethod
    def pending_counts(self) -> Mapping[str, int] | None:
        """How many tasks of each type wait in the backend (``scheduled``: not yet due, or due and not yet
        claimed by a worker; not running, finished or cancelled ones), read now: what the
        ``mutexcron_tasks_pending`` gauge shows. A type with none may be absent or 0. None when this backend
        cannot count them cheaply (the gauge then has no samples from it)."""

    @property
    def pending_source(self) -> str:
        """Names the tasks :meth:`pending_counts` counts: two backend objects of one process on the same tasks
        give the same name, so the gauge counts them once. By default, this object."""
        return f"{type(self).__qualname__}@{id(self):x}"

    @abstractmethod
    def store_result(self, task_id: str, text: str) -> bool:
        """Keep ``text`` (an outcome, e.g. a ``django.tasks`` result as JSON) with the task's record, replacing
        the one kept before; it lives and expires with the record. False (nothing kept) if the record is gone."""

    @abstractmethod
    def load_result(self, task_id: str) -> str | None:
        """The text :meth:`store_result` kept for the task, or None (none kept, or the record is gone)."""

    def consume(
        self,
        task_types: Sequence[str],
        handle: Callable[[Delivery], None],
        stop: threading.Event,
        *,
        visibility_timeout: Callable[[str], timedelta],
        prefetch: int = 10,
        cancelled: Callable[[str], None] | None = None,
    ) -> None:
        """Deliver due tasks of ``task_types`` to ``handle`` (in this thread) until ``stop`` is set.

        ``visibility_timeout(task_type)`` says how long a claimed task stays invisible to other workers.
        ``cancelled(task_type)``, if given, is told of each cancelled task that reached this worker and was
        dropped unrun (only a backend that delivers cancelled tasks, RabbitMQ, calls it).
        Returns soon (within a fraction of a second) after ``stop`` is set. Backends implement :meth:`deliver`.
        """
        types = consumed_types(task_types)
        self.deliver(ConsumeRequest(types, handle, stop, visibility_timeout, max(1, int(prefetch)), cancelled))

    @abstractmethod
    def deliver(self, request: ConsumeRequest) -> None:
        """What :meth:`consume` does, once its arguments are checked: each backend's own way of delivering."""

    @property
    def record_store(self) -> TaskRecordStore | None:
        """The store that keeps this backend's task records beside its broker (the ``cancel_store``), or None
        for a backend that keeps its own: what ``check --deploy`` inspects as "the task cancel store"."""
        return None

    def eviction_policy(self) -> str | None:
        """The server's policy for dropping keys when its memory is full (Redis's ``maxmemory-policy``), or None
        for a backend that never evicts (or may not say): what ``check --deploy`` warns about (W003)."""
        return None

    def wake(self) -> None:  # noqa: B027 - backends whose consume() can block for long override it
        """Make a consume() that is waiting (in this process) look again now: after ``stop`` was set."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""


@dataclass(frozen=True)
class ConsumeRequest:
    """One consume() call's arguments, checked: what :meth:`TaskBackend.deliver` serves."""

    types: list[str]  # distinct and valid, at least one
    handle: Callable[[Delivery], None]
    stop: threading.Event
    visibility_timeout: Callable[[str], timedelta]
    prefetch: int  # at least 1
    cancelled: Callable[[str], None] | None = None  # told the type of each cancelled task dropped unrun


def consumed_types(task_types: Sequence[str]) -> list[str]:
    """The distinct task types of a consume() call, in order, each validated; at least one."""
    types = [validate_task_type(task_type) for task_type in dict.fromkeys(task_types)]
    if not types:
        raise UnknownTaskType("consume: no task types given")
    return types


# -- shared by the backends that claim tasks with a visibility deadline (Redis, SQL) ---------------------


class ClaimingConsumer(ABC):
    """What one consume() call of a claiming backend knows, and how it backs off when the store fails."""

    def __init__(self, request: ConsumeRequest) -> None:
        self.types = request.types
        self.type_set = set(request.types)
        self.handle = request.handle
        self.stop = request.stop
        self.visibility_timeout = request.visibility_timeout
        self.limit = request.prefetch
        self.token = uuid.uuid4().hex[:12]
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{self.token}"
        self.outage = WorkerOutage(self.owner)

    def store_failed(self, error: StoreUnavailable) -> None:
        """A claim cycle failed (the first one too: a worker started while its store is down waits for it, as the
        scheduler does): log the outage once, and wait before the next try (exponential, at most 1 s: a worker
        runs tasks again within a second of the store's return) unless ``stop`` is set meanwhile."""
        pause = min(1.0, 0.1 * 2 ** min(self.outage.failures + 1, 4))
        self.outage.failed(error, pause)
        self.stop.wait(pause)

    def store_answered(self) -> None:
        self.outage.answered()

    @abstractmethod
    def run(self) -> None:
        """Claim, run and sleep until ``stop`` is set: the consume() call itself."""

    def wake(self) -> None:  # noqa: B027 - a consumer that never waits for long needs none
        """Make this consumer look again now if it is waiting (called from another thread)."""


def warn_stale_settle(delivery: Delivery, what: str) -> None:
    """Ack, retry_later, fail or release changed nothing: the claim expired and the task moved on."""
    logger.warning("task %s (%s): could not %s attempt %d: the claim expired and the task was re-queued or taken "
                   "by another worker (raise the handler's visibility_timeout?)",
                   delivery.id, delivery.task_type, what, delivery.attempt)


class ClaimedDelivery(Delivery):
    """A delivery of a backend that claims tasks with a visibility deadline (Redis, SQL): a
    :class:`ClaimHeartbeat` (its :attr:`~Delivery.heartbeat`) extends the claim while the handler runs;
    settling stops that first."""

    @property
    @abstractmethod
    def visibility_seconds(self) -> float:
        """How long the claim lasts unless extended."""

    def settle(self, what: str, change: Callable[[], bool]) -> None:
        """Stop extending the claim, then run ``change`` (one conditional update in the store: False if the
        claim is no longer this delivery's, which is logged)."""
        if self.heartbeat is not None:
            self.heartbeat.untrack(cast(Self, self))  # mypy types ``self`` as the class here, not Self
        if not change():
            warn_stale_settle(self, what)


D = TypeVar("D", bound=ClaimedDelivery)

class ClaimHeartbeat(ABC, Generic[D]):
    """A thread that extends the claims of a worker's deliveries until they are settled.

    A claim is extended (to now + its visibility timeout) once a third of that timeout has passed since
    it was made or last extended, so a long healthy handler keeps its task; the thread sleeps otherwise.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next: dict[D, float] = {}  # delivery -> monotonic time of its next extension
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mutexcron-task-heartbeat", daemon=True)
        self._thread.start()

    @abstractmethod
    def extend(self, batch: list[D]) -> Collection[D]:
        """Extend the claims of ``batch`` in the store; return those still held. Raises StoreUnavailable."""

    def round_done(self) -> None:
        """Called in the heartbeat's thread after each round of extensions, and when it ends."""

    def track(self, delivery: D, claimed_at: float) -> None:
        delivery.heartbeat = self
        with self._cond:
            self._next[delivery] = claimed_at + delivery.visibility_seconds / 3
            self._cond.notify()

    def untrack(self, delivery: D) -> None:
        with self._cond:
            self._next.pop(delivery, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._closed:
                        now = time.monotonic()
                        upcoming = min(self._next.values(), default=None)
                        if upcoming is not None and upcoming <= now:
                            break
                        self._cond.wait(None if upcoming is None else upcoming - now)
                    if self._closed:
                        return
                    started = time.monotonic()
                    batch = [d for d, at in self._next.items() if at <= started]
                self._extend(batch, started)
        finally:
            self.round_done()

    def _extend(self, batch: list[D], started: float) -> None:
        try:
            kept = self.extend(batch)
        except StoreUnavailable as error:
            logger.warning("could not extend the claims of %d task(s): %s", len(batch), error)
            with self._cond:  # try again soon, well before the claims run out
                for delivery in batch:
                    if delivery in self._next:
                        self._next[delivery] = started + min(1.0, delivery.visibility_seconds / 6)
            return
        finally:
            self.round_done()
        with self._cond:
            for delivery in batch:
                if delivery not in self._next:
                    continue  # settled meanwhile
                if delivery in kept:
                    self._next[delivery] = started + delivery.visibility_seconds / 3
                else:
                    del self._next[delivery]
                    logger.warning("task %s (%s): the claim of attempt %d was lost; another worker may run it",
                                   delivery.id, delivery.task_type, delivery.attempt)


def run_batch(deliveries: Sequence[D], handle: Callable[[D], None], stop: threading.Event,
              heartbeat: ClaimHeartbeat[D], owner: str) -> None:
    """Run claimed deliveries in order; once ``stop`` is set, give the ones not started back."""
    for index, delivery in enumerate(deliveries):
        if stop.is_set():
            for unstarted in deliveries[index:]:
                try:
                    unstarted.release()
                except StoreUnavailable as error:
                    logger.warning("task %s: could not give it back (%s); it returns after its visibility "
                                   "timeout", unstarted.id, error)
            return
        try:
            handle(delivery)
        except Exception:  # the task comes back after its visibility timeout
            logger.exception("task worker %s: handling task %s (%s) failed; it will be run again after its "
                             "visibility timeout", owner, delivery.id, delivery.task_type)
        finally:
            heartbeat.untrack(delivery)


class RunningConsumers:
    """The consume() calls of one backend running in this process, so that its wake() reaches them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[ClaimingConsumer] = set()

    def run(self, consumer: ClaimingConsumer) -> None:
        """Run ``consumer`` (in this thread, until its ``stop`` is set), reachable by :meth:`wake` meanwhile."""
        with self._lock:
            self._running.add(consumer)
        try:
            consumer.run()
        finally:
            with self._lock:
                self._running.discard(consumer)

    def wake(self) -> None:
        """Make every running consumer look again now (see :meth:`TaskBackend.wake`)."""
        with self._lock:
            running = list(self._running)
        for consumer in running:
            consumer.wake()


class ClaimingBackend(TaskBackend):
    """A backend whose workers claim due tasks with a visibility deadline (Redis, SQL): each consume() call
    runs the backend's :class:`ClaimingConsumer`, and wake() reaches every one running in this process."""

    def __init__(self) -> None:
        self._consumers = RunningConsumers()

    @abstractmethod
    def consumer(self, request: ConsumeRequest) -> ClaimingConsumer:
        """The consumer that serves one consume() call."""

    def deliver(self, request: ConsumeRequest) -> None:
        self._consumers.run(self.consumer(request))

    def wake(self) -> None:
        self._consumers.wake()

"""``TaskQueue``: schedule, cancel and inspect delayed one-off tasks, and run workers for them."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import traceback
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import StoreConfigError
from ..plugins import Wording, build_from_url, schemes
from ..urls import shown
from .backends.base import Delivery, TaskBackend
from .handlers import HandlerRegistry, default_handlers, validate_task_type
from .interrupt import stop_on_ctrl_c
from .model import JOB_TASK_TYPE, NewTask, PayloadError, RetryLater, TaskInfo, TaskStatus, UnknownTaskType
from .telemetry import TaskTelemetry

__all__ = ["TaskQueue", "backend_from_url", "check_task_id"]

logger = logging.getLogger("mutexcron.tasks")

UNKNOWN_TYPE_RETRY = timedelta(minutes=1)
SCHEDULE_OPTIONS = frozenset({"run_at", "delay", "task_id", "require_handler"})
# Task types of the library's own, scheduled by processes that do not run them: run_on="tasks" ticks, which a
# scheduler enqueues and only workers handle (a JobRunner of mutexcron.tasks.job_runs registers their handler there).
RESERVED_TYPES = frozenset({JOB_TASK_TYPE})
_TASK_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
UNKNOWN_TYPE_ATTEMPTS = 5

# scheme -> dotted path of the backend class (imported on first use); other packages add theirs (mutexcron.plugins)
BACKENDS = schemes("task_backend")


def backend_from_url(url: str | TaskBackend, *, cancel_store: str | None = None) -> TaskBackend:
    """A task backend from a URL (``redis://``, ``amqp://``, ``django://``) or a backend object."""
    if isinstance(url, TaskBackend):
        return url
    if not isinstance(url, str) or "://" not in url:
        raise StoreConfigError(f"task backend must be a URL (redis://, amqp://, django://), not {shown(url)}")
    options = {} if cancel_store is None else {"cancel_store": cancel_store}
    backend: TaskBackend = build_from_url(url, BACKENDS, TaskBackend, Wording("task backend"), **options)
    return backend


def check_task_id(task_type: str, task_id: object) -> str:
    """``task_id`` if it is a usable id for a caller to give a task: 1-64 letters, digits and ``_ . : -``,
    starting with a letter or digit (a key part in Redis, a primary key in SQL); PayloadError otherwise."""
    if not isinstance(task_id, str) or not _TASK_ID_RE.fullmatch(task_id):
        raise PayloadError(f"task {task_type!r}: task_id={task_id!r:.80} is invalid: use 1-64 characters of "
                           "letters, digits and _ . : - (starting with a letter or digit)")
    return task_id


def _encode(task_type: str, payload: Any) -> str:
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise PayloadError(f"task {task_type!r}: payload is not JSON-serialisable: {error}") from None


def _due(task_type: str, run_at: datetime | None, delay: timedelta | None, now: datetime) -> datetime:
    """When the task is due, in UTC; a time outside datetime's range (year 1 east of UTC, a delay of
    millennia) is a PayloadError naming it, not an OverflowError."""
    if run_at is not None and delay is not None:
        raise PayloadError(f"task {task_type!r}: give run_at or delay, not both")
    if delay is not None:
        if not isinstance(delay, timedelta):
            raise PayloadError(f"task {task_type!r}: delay must be a timedelta, not {delay!r}")
        try:
            return now + max(delay, timedelta(0))
        except OverflowError:
            raise PayloadError(f"task {task_type!r}: delay={delay!r} ends after the year 9999") from None
    if run_at is None:
        return now
    if not isinstance(run_at, datetime) or run_at.tzinfo is None or run_at.utcoffset() is None:
        raise PayloadError(f"task {task_type!r}: run_at={run_at!r} must be an aware datetime")
    try:
        return run_at.astimezone(UTC)
    except OverflowError:
        raise PayloadError(f"task {task_type!r}: run_at={run_at!r} is outside the years 1-9999 in UTC") from None


class TaskQueue:
    """Delayed one-off tasks on a backend chosen by URL.

    ``TaskQueue("redis://…")``, ``TaskQueue("amqp://…", cancel_store="redis://…")`` or, in Django,
    ``TaskQueue("django://")``. ``handlers`` defaults to the registry that ``@task_handler`` fills.
    ``metrics=True`` (the ``prometheus`` extra) counts the attempts its workers end and serves the backend's
    pending tasks; ``tracing=True`` (the ``otel`` extra) carries the trace context of ``schedule()`` with each
    task and runs its handler in a child span (see :mod:`mutexcron.tasks.telemetry`).
    """

    def __init__(
        self,
        url: str | TaskBackend,
        *,
        cancel_store: str | None = None,
        handlers: HandlerRegistry | None = None,
        worker_id: str | None = None,
        metrics: bool = False,
        tracing: bool = False,
        require_handlers: bool = True,
    ) -> None:
        self.telemetry = TaskTelemetry(metrics=metrics, tracing=tracing)  # checked before connecting to anything
        if not isinstance(require_handlers, bool):
            raise StoreConfigError(f"TaskQueue require_handlers must be True or False, not {require_handlers!r}")
        self.backend = backend_from_url(url, cancel_store=cancel_store)
        self.handlers = handlers if handlers is not None else default_handlers
        self.require_handlers = require_handlers
        self._worker_id = worker_id
        self._stop = threading.Event()  # set by stop(); cleared when the last run_worker() it ended returns
        self._running = 0  # run_worker() calls in progress
        self._running_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.worker_error: BaseException | None = None  # why a background worker (start()) died, if it did
        self.telemetry.watch(self.backend)

    @property
    def worker_id(self) -> str:
        return self._worker_id or f"{socket.gethostname()}:{os.getpid()}"

    # -- producing -------------------------------------------------------------------------------

    def schedule(
        self, task_type: str, payload: Any = None, *, run_at: datetime | None = None, delay: timedelta | None = None,
        task_id: str | None = None, require_handler: bool | None = None,
    ) -> str:
        """Store a task due at ``run_at`` (aware) or after ``delay`` (default: now); returns its id.

        ``task_id``: the caller's id for it (see :func:`check_task_id`), which makes scheduling idempotent: if a
        task of that id exists already, nothing is stored and the id is returned (that task runs, once).
        A type with no handler in this queue's registry raises :class:`UnknownTaskType` (a typo would otherwise
        wait forever), unless ``require_handler=False`` (default: the queue's ``require_handlers``): for a producer
        whose handlers live only in the workers' processes."""
        options = {"run_at": run_at, "delay": delay, "task_id": task_id, "require_handler": require_handler}
        (scheduled,) = self.schedule_many([(task_type, payload, options)])
        return scheduled

    def schedule_many(self, tasks: Iterable[tuple[str, Any] | tuple[str, Any, dict[str, Any]]]) -> list[str]:
        """Schedule many tasks in few round trips: ``[(type, payload), (type, payload, {"delay": …}), …]``.

        Options: ``run_at``, ``delay``, ``task_id``, ``require_handler`` (as :meth:`schedule`'s). Every task is
        checked (type and its handler, JSON payload, aware time, id) before any is stored; a task whose id comes
        again in the batch is stored once.
        """
        now = datetime.now(UTC)
        trace_context = self.trace_context()
        prepared: dict[str, NewTask] = {}
        ids: list[str] = []
        for entry in tasks:
            if not isinstance(entry, tuple | list) or not 2 <= len(entry) <= 3:
                raise PayloadError(f"schedule_many: each task must be (type, payload[, options]), not {entry!r}")
            task_type, payload, *rest = entry
            options = rest[0] if rest else {}
            if not isinstance(options, dict):
                raise PayloadError(f"task {task_type!r}: options must be a dict (run_at, delay, task_id, "
                                   f"require_handler), not {options!r}")
            unknown = set(options) - SCHEDULE_OPTIONS
            if unknown:
                raise PayloadError(f"task {task_type!r}: unknown option(s) {sorted(unknown)}; use run_at, delay, "
                                   "task_id or require_handler")
            validate_task_type(task_type)
            self._check_handler(task_type, options.get("require_handler"))
            given = options.get("task_id")
            task = NewTask(
                id=uuid.uuid4().hex if given is None else check_task_id(task_type, given),
                task_type=task_type,
                payload=_encode(task_type, payload),
                run_at=_due(task_type, options.get("run_at"), options.get("delay"), now),
                trace_context=trace_context,
            )
            prepared.setdefault(task.id, task)
            ids.append(task.id)
        if prepared:
            self.backend.enqueue(list(prepared.values()))
        return ids

    def _check_handler(self, task_type: str, required: object) -> None:
        """UnknownTaskType for a type no handler of this queue's registry runs, unless not required (the call's
        ``require_handler``, else the queue's ``require_handlers``). The library's own types always pass."""
        if required is not None and not isinstance(required, bool):
            raise PayloadError(f"task {task_type!r}: require_handler must be True, False or None, not {required!r}")
        if not (self.require_handlers if required is None else required) or task_type in RESERVED_TYPES:
            return
        if task_type not in self.handlers:
            known = ", ".join(self.handlers.types()) or "none"
            raise UnknownTaskType(
                f"no handler for task type {task_type!r} in this process (registered: {known}), so no worker may "
                "ever run it; if its handler runs only in the workers' processes, schedule it with "
                "require_handler=False, or make the queue with TaskQueue(..., require_handlers=False) (in Django: "
                "MUTEXCRON['TASKS']['REQUIRE_HANDLERS'] = False)")

    def trace_context(self) -> str | None:
        """What a task scheduled now carries of the current trace (``NewTask.trace_context``): None unless
        ``tracing=True`` and a span is current. For code that builds its NewTasks itself (django.tasks)."""
        return self.telemetry.trace_context()

    def cancel(self, task_id: str) -> bool:
        """True if the task will now never run; False if it already started, finished, or is unknown."""
        return self.backend.cancel(task_id)

    def status(self, task_id: str) -> TaskStatus:
        """``scheduled``, ``running``, ``succeeded``, ``failed``, ``cancelled`` or ``unknown``."""
        return self.backend.status(task_id)

    def info(self, task_id: str) -> TaskInfo | None:
        return self.backend.info(task_id)

    def retry(self, task_id: str) -> bool:
        """Run a failed task again now, with its attempts starting over. False if it is not failed."""
        return self.backend.retry(task_id)

    # -- consuming -------------------------------------------------------------------------------

    def run_worker(self, task_types: Sequence[str] | None = None, *, prefetch: int = 10) -> None:
        """Run due tasks of ``task_types`` (default: every registered type) until :meth:`stop`. Blocking.

        A stop asked for before this call, or while it runs, ends it; once it returned, a new call runs again.
        In the main thread (under Python's default SIGINT handler) Ctrl-C stops it after the task it is running,
        with one log line, and it returns; a second Ctrl-C leaves at once (that task runs again after its
        visibility timeout).
        """
        types = list(task_types) if task_types is not None else self.handlers.types()
        for task_type in types:
            self.handlers.get(task_type)  # an unknown type fails here, before anything is consumed
        if not types:
            raise UnknownTaskType("run_worker: no task types to run (register handlers with @task_handler)")
        with self._running_lock:
            self._running += 1
        try:
            with stop_on_ctrl_c(self.worker_id, self._stop_consuming) as ctrl_c:
                # Said once Ctrl-C is handled: a Ctrl-C after this line stops the worker cleanly.
                logger.info("task worker %s consuming %s", self.worker_id, ", ".join(types))
                try:
                    self.backend.consume(
                        types, self._handle, self._stop,
                        visibility_timeout=lambda task_type: self.handlers.get(task_type).visibility_timeout,
                        prefetch=prefetch, cancelled=self.telemetry.cancelled if self.telemetry.metrics else None,
                    )
                except KeyboardInterrupt:
                    if not ctrl_c.pressed:
                        raise  # not a second Ctrl-C of the user's (nothing was installed, or a handler raised it)
                    logger.warning("task worker %s: Ctrl-C again: left without waiting for the running task",
                                   self.worker_id)
        finally:
            with self._running_lock:
                self._running -= 1
                if self._running == 0:
                    self._stop.clear()  # that stop is spent: it ended every worker running on this queue
        logger.info("task worker %s stopped", self.worker_id)

    def _stop_consuming(self) -> None:
        """Ask the workers of this queue to stop after their running task, without waiting for them."""
        self._stop.set()
        self.backend.wake()

    def start(self, task_types: Sequence[str] | None = None, *, prefetch: int = 10) -> None:
        """Run a worker in a background thread."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("the worker is already running")
        self._stop.clear()
        self.worker_error = None

        def run() -> None:
            try:
                self.run_worker(task_types, prefetch=prefetch)
            except Exception as error:
                self.worker_error = error
                logger.exception("task worker %s died; no tasks are run by it any more", self.worker_id)

        self._thread = threading.Thread(target=run, name="mutexcron-task-worker", daemon=True)
        self._thread.start()

    @property
    def worker_alive(self) -> bool:
        """True while a background worker started with :meth:`start` is running."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Ask the worker to stop after the task it is running, and wait for it (background worker).

        The request holds until a worker ends on it: one that :meth:`run_worker` has not reached yet ends at once.
        """
        self._stop_consuming()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self.telemetry.unwatch()
        self.backend.close()

    def __enter__(self) -> TaskQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _handle(self, delivery: Delivery) -> None:
        """Run one delivered task: ack on success, back off and retry on failure, keep it failed at the end.

        The handler runs in the task's span (tracing on); the attempt is counted before it is settled (metrics
        on), so a status read after the settle finds it counted."""
        telemetry = self.telemetry
        try:
            handler = self.handlers.get(delivery.task_type)
        except UnknownTaskType as error:  # the worker was asked for the type, so its handler went away
            if delivery.attempt >= UNKNOWN_TYPE_ATTEMPTS:
                telemetry.finished(delivery, "failed")
                delivery.fail(f"{error}; gave up after {delivery.attempt} deliveries")
            else:
                telemetry.finished(delivery, "retrying")
                delivery.retry_later(UNKNOWN_TYPE_RETRY, str(error))
            logger.error("%s; task %s (delivery %d)", error, delivery.id, delivery.attempt)
            return
        if delivery.attempt > handler.max_attempts:
            # Only a claim that expired gets here: the worker running the last attempt died (the task may
            # be what kills it). Give up rather than crash workers forever.
            telemetry.finished(delivery, "failed")
            delivery.fail(f"attempt {delivery.attempt - 1} of {handler.max_attempts} never finished: its worker died "
                          "or hung past the visibility timeout")
            logger.error("task %s (%s) failed: its last attempt never finished", delivery.id, delivery.task_type)
            return
        started = datetime.now(UTC)
        try:
            with telemetry.span(delivery):
                handler.func(json.loads(delivery.payload))
        except RetryLater as later:
            logger.info("task %s (%s): %s; delivered again in %s", delivery.id, delivery.task_type, later, later.delay)
            telemetry.finished(delivery, "retrying", started=started, finished=datetime.now(UTC))
            delivery.retry_later(later.delay, str(later))
            return
        except Exception:
            finished = datetime.now(UTC)
            failure = traceback.format_exc()
            if delivery.attempt >= handler.max_attempts:
                logger.error("task %s (%s) failed for good after %d attempt(s)", delivery.id, delivery.task_type,
                             delivery.attempt, exc_info=True)
                telemetry.finished(delivery, "failed", started=started, finished=finished)
                delivery.fail(failure)
            else:
                delay = handler.delay_before(delivery.attempt + 1)
                logger.warning("task %s (%s) attempt %d failed; retrying in %s", delivery.id, delivery.task_type,
                               delivery.attempt, delay, exc_info=True)
                telemetry.finished(delivery, "retrying", started=started, finished=finished)
                delivery.retry_later(delay, failure)
            return
        telemetry.finished(delivery, "succeeded", started=started, finished=datetime.now(UTC))
        delivery.ack()

"""What a :class:`~mutexcron.tasks.TaskQueue` tells its telemetry: ``TaskQueue(metrics=, tracing=)``.

Tracing: ``schedule()`` carries the current W3C trace context with the task (``NewTask.trace_context``, kept by
every backend) and the worker runs the handler in ``mutexcron.task <type>``, a child of the span current at
``schedule()`` (:func:`mutexcron.telemetry.tracing.task_span`). Metrics: every attempt a worker ends is counted with its
lateness and duration (:func:`mutexcron.telemetry.metrics.task_finished`), and the backend's
:meth:`~mutexcron.tasks.backends.base.TaskBackend.pending_counts` is served as ``mutexcron_tasks_pending``.
The libraries are loaded, and a missing extra named, as for the Scheduler (:func:`mutexcron.telemetry.load_part`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Any

from ..errors import StoreConfigError
from ..telemetry import check_flags, load_part
from .backends.base import Delivery, TaskBackend
from .model import encode_trace_context

__all__ = ["TaskTelemetry"]

logger = logging.getLogger("mutexcron.tasks")

_NOTHING = nullcontext()

# pending_source -> the open backends of this process counting those tasks; the gauge reads the newest one,
# once, however many queues share it (a producer and a worker on one URL).
_watched: dict[str, list[TaskBackend]] = {}
_watched_lock = threading.Lock()


class TaskTelemetry:
    """The metrics and tracing of one TaskQueue (each part loaded only when asked for)."""

    def __init__(self, *, metrics: bool, tracing: bool) -> None:
        check_flags("TaskQueue", StoreConfigError, metrics=metrics, tracing=tracing)
        self.metrics, self.tracing = metrics, tracing

        def part(option: str, name: str) -> Any:
            return load_part(option, what=f"TaskQueue {option}=True", error=StoreConfigError, name=name)

        self._task_finished: Callable[..., None] | None = part("metrics", "task_finished") if metrics else None
        self._watch: Callable[[str, Callable[[], Mapping[str, int]]], None] | None = (
            part("metrics", "watch_pending") if metrics else None)
        self._unwatch: Callable[[str], None] | None = part("metrics", "unwatch_pending") if metrics else None
        self._inject: Callable[[], Mapping[str, str]] | None = (
            part("tracing", "inject_trace_context") if tracing else None)
        self._task_span: Callable[..., AbstractContextManager[object]] | None = (
            part("tracing", "task_span") if tracing else None)
        self._backend: TaskBackend | None = None

    # -- producing -------------------------------------------------------------------------------

    def trace_context(self) -> str | None:
        """The current trace context as a task keeps it (bounded JSON text), or None: tracing off, no span
        current, or a propagator that failed (logged; scheduling never fails for it)."""
        if self._inject is None:
            return None
        try:
            return encode_trace_context(self._inject())
        except Exception:
            logger.exception("mutexcron: could not read the current trace context; the task carries none")
            return None

    # -- consuming -------------------------------------------------------------------------------

    def span(self, delivery: Delivery) -> AbstractContextManager[object]:
        """``mutexcron.task <type>`` around the handler (tracing on), a child of the span of ``schedule()``."""
        if self._task_span is None:
            return _NOTHING
        try:
            return self._task_span(delivery.task_type, delivery.trace_context, task_id=delivery.id,
                                   due=delivery.due, attempt=delivery.attempt)
        except Exception:
            logger.exception("mutexcron: could not start the span of task %s; it runs without one", delivery.id)
            return _NOTHING

    def finished(self, delivery: Delivery, outcome: str, *, started: datetime | None = None,
                 finished: datetime | None = None) -> None:
        """An attempt ended: "succeeded", "failed" or "retrying" (metrics on). Timings only if a handler ran."""
        if self._task_finished is None:
            return
        try:
            self._task_finished(delivery.task_type, outcome, due=delivery.due if started is not None else None,
                                started=started, finished=finished)
        except Exception:
            logger.exception("mutexcron: could not count task %s (%s)", delivery.id, outcome)

    def cancelled(self, task_type: str) -> None:
        """The worker dropped a cancelled task unrun (a broker's backend delivers those)."""
        if self._task_finished is not None:
            try:
                self._task_finished(task_type, "cancelled")
            except Exception:
                logger.exception("mutexcron: could not count a cancelled task of %s", task_type)

    # -- the pending gauge -----------------------------------------------------------------------

    def watch(self, backend: TaskBackend) -> None:
        """Serve ``backend.pending_counts()`` in ``mutexcron_tasks_pending`` until :meth:`unwatch` (metrics on)."""
        if self._watch is None or self._backend is not None:
            return
        self._backend = backend
        with _watched_lock:
            sharing = _watched.setdefault(backend.pending_source, [])
            sharing.append(backend)
            self._watch(backend.pending_source, _counts_of(backend))

    def unwatch(self) -> None:
        backend, self._backend = self._backend, None
        if backend is None or self._watch is None or self._unwatch is None:
            return
        source = backend.pending_source
        with _watched_lock:
            sharing = _watched.get(source, [])
            if backend in sharing:
                sharing.remove(backend)
            if sharing:
                self._watch(source, _counts_of(sharing[-1]))
            else:
                _watched.pop(source, None)
                self._unwatch(source)


def _counts_of(backend: TaskBackend) -> Callable[[], Mapping[str, int]]:
    """What the gauge calls at each scrape: a backend that cannot count gives no samples."""
    def counts() -> Mapping[str, int]:
        return backend.pending_counts() or {}

    return counts

"""OpenTelemetry spans of job runs and delayed tasks (the ``otel`` extra: opentelemetry-api only).

mutexcron creates spans through the API's global tracer provider: without an SDK configured by the
application they are no-ops. :class:`JobTracing` (``Scheduler(tracing=True)``) opens one span per run that
this instance ran, ``mutexcron.job <name>``, current while the body runs (so the body's own spans are its
children), with the attributes below; an exception from the body is recorded and sets the status ERROR.

Skips make no span (nor span event): every tick of a fleet of N instances has N-1 skips
(``skipped_already_ran``), which would drown the one span that did the work. Count them with the metrics
(``mutexcron_job_runs_total{outcome=...}``) instead.

Tasks: :func:`inject_trace_context` puts the current W3C trace context into the task at ``schedule()`` and
:func:`task_span` opens ``mutexcron.task <type>`` as its child when a worker runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING

from opentelemetry import propagate, trace
from opentelemetry.context import Context, attach, detach
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .. import __version__
from . import Telemetry

if TYPE_CHECKING:
    from ..records import JobContext
    from ..registry import Job

__all__ = [
    "ATTR_BACKFILL",
    "ATTR_CATCH_UP",
    "ATTR_FIRE_TIME",
    "ATTR_INSTANCE",
    "ATTR_JOB",
    "ATTR_OUTCOME",
    "ATTR_TOKEN",
    "JobTracing",
    "inject_trace_context",
    "task_span",
]

TRACER_NAME = "mutexcron"
ATTR_JOB = "mutexcron.job"
ATTR_FIRE_TIME = "mutexcron.fire_time"  # ISO 8601, UTC
ATTR_OUTCOME = "mutexcron.outcome"  # "succeeded" or "failed"
ATTR_TOKEN = "mutexcron.token"  # the lock's fencing token
ATTR_INSTANCE = "mutexcron.instance"
ATTR_CATCH_UP = "mutexcron.catch_up"
ATTR_LOCK_LOST = "mutexcron.lock_lost"  # set (True) only when a heartbeat found the lock taken away
ATTR_BACKFILL = "mutexcron.backfill"  # set (True) only on a run of Scheduler.backfill
ATTR_TASK_TYPE = "mutexcron.task_type"
ATTR_TASK_ID = "mutexcron.task_id"
ATTR_TASK_DUE = "mutexcron.due"  # ISO 8601
ATTR_TASK_ATTEMPT = "mutexcron.attempt"


# The API's tracer: before the application sets a provider, a proxy that follows the provider once it is set.
_TRACER = trace.get_tracer(TRACER_NAME, __version__)
_NO_SPAN = nullcontext(trace.INVALID_SPAN)
Attributes = dict[str, str | int | bool]


def _no_sdk() -> bool:
    """True while no tracer provider is set (or the API's no-op one): every span would be a no-op, so none is
    started and whatever is current stays current."""
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


class _CurrentSpan:
    """A span, current while the block runs; ``mutexcron.outcome`` is "succeeded", or "failed" with the
    exception recorded (status ERROR). A class, not a generator: it runs around every job body."""

    __slots__ = ("_attributes", "_ctx", "_kind", "_name", "_parent", "_span", "_token")

    def __init__(self, name: str, attributes: Attributes, *, kind: SpanKind = SpanKind.INTERNAL,
                 parent: Context | None = None, ctx: JobContext | None = None) -> None:
        self._name, self._attributes, self._kind, self._parent, self._ctx = name, attributes, kind, parent, ctx

    def __enter__(self) -> Span:
        span = self._span = _TRACER.start_span(self._name, context=self._parent, kind=self._kind,
                                               attributes=self._attributes)
        self._token = attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        span = self._span
        try:
            detach(self._token)
            if error is None:
                span.set_attribute(ATTR_OUTCOME, "succeeded")
            else:
                span.set_attribute(ATTR_OUTCOME, "failed")
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            if self._ctx is not None and self._ctx.lock_lost:
                span.set_attribute(ATTR_LOCK_LOST, True)
        finally:
            span.end()


class JobTracing(Telemetry):
    """``Scheduler(tracing=True)``: a span around each job body this instance runs."""

    def body(self, job: Job, ctx: JobContext) -> AbstractContextManager[object]:
        if _no_sdk():
            return _NO_SPAN
        attributes: Attributes = {
            ATTR_JOB: ctx.job_name, ATTR_FIRE_TIME: ctx.fire_time.isoformat(), ATTR_TOKEN: ctx.token,
            ATTR_INSTANCE: ctx.instance_id, ATTR_CATCH_UP: ctx.catch_up,
        }
        if ctx.backfill:
            attributes[ATTR_BACKFILL] = True
        return _CurrentSpan(f"mutexcron.job {job.name}", attributes, ctx=ctx)


def inject_trace_context(carrier: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The current trace context as text fields (``traceparent``, ``tracestate``: W3C Trace Context, through
    the global propagator), added to ``carrier`` if given; empty when no span is current."""
    fields: dict[str, str] = {}
    propagate.inject(fields)
    if carrier is not None:
        carrier.update(fields)
    return fields


def task_span(task_type: str, carrier: Mapping[str, str] | None, *, task_id: str | None = None,
              due: datetime | None = None, attempt: int | None = None) -> AbstractContextManager[Span]:
    """``mutexcron.task <type>``, current while the task runs: a child of the span that was current at
    ``schedule()`` (``carrier``: what :func:`inject_trace_context` gave), a root span without one. An exception
    is recorded and sets the status ERROR; ``mutexcron.outcome`` says "succeeded" or "failed"."""
    if _no_sdk():
        return _NO_SPAN
    attributes: Attributes = {ATTR_TASK_TYPE: task_type}
    if task_id is not None:
        attributes[ATTR_TASK_ID] = task_id
    if due is not None:
        attributes[ATTR_TASK_DUE] = due.isoformat()
    if attempt is not None:
        attributes[ATTR_TASK_ATTEMPT] = attempt
    parent = propagate.extract(dict(carrier or {}), context=Context())  # nothing in the carrier: a root span
    return _CurrentSpan(f"mutexcron.task {task_type}", attributes, kind=SpanKind.CONSUMER, parent=parent)

"""What a delayed task is, in every backend: its id, type, JSON payload, due time and status."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from ..errors import MutexcronError

__all__ = ["JOB_TASK_TYPE", "MAX_TRACE_CONTEXT_CHARS", "NewTask", "PayloadError", "TaskError", "TaskInfo",
           "TaskStatus", "UnknownTaskType", "decode_result", "decode_trace_context", "encode_result",
           "encode_trace_context"]

# The trace context a task carries (its JSON text) is at most this long: a W3C traceparent is 55 characters,
# a full tracestate 512; baggage and the like are kept only while they fit.
# The task type of a run_on="tasks" tick (mutexcron.tasks.job_runs): the queue reserves it for the workers that run
# jobs. Not "mutexcron.…": the RabbitMQ backend keeps those names for its own queues.
JOB_TASK_TYPE = "mutexcron-job"
MAX_TRACE_CONTEXT_CHARS = 1024
_MAX_TRACE_KEY_CHARS = 64
_FIRST_TRACE_FIELDS = ("traceparent", "tracestate")


class TaskStatus(StrEnum):
    SCHEDULED = "scheduled"  # waiting for its due time (or for a retry)
    RUNNING = "running"  # claimed by a worker; back to scheduled if that worker dies (visibility timeout)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # out of attempts; kept with its error until retried by hand
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"  # no such id (or its record expired)


def stored_status(value: str | None) -> TaskStatus:
    """A status as a backend keeps it, read back: UNKNOWN for anything else (a record written by hand)."""
    try:
        return TaskStatus(value or "")
    except ValueError:
        return TaskStatus.UNKNOWN


def stored_payload(text: str) -> object:
    """A payload as a backend keeps it (JSON text), decoded; text that is not JSON (written by hand) as it is."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def encode_result(result: Mapping[str, Any]) -> str:
    """A result document (what a task's result slot keeps: ``TaskBackend.store_result``) as compact JSON text."""
    return json.dumps(dict(result), separators=(",", ":"))


def decode_result(text: str | None) -> dict[str, Any]:
    """The result document :func:`encode_result` kept, or {} for none or for text that is not a JSON object."""
    if not text:
        return {}
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _header_text(value: object, longest: int) -> bool:
    """Printable ASCII of 1 to ``longest`` characters: what a propagator's header may hold."""
    return isinstance(value, str) and 0 < len(value) <= longest and value.isascii() and value.isprintable()


def _as_json(fields: Mapping[str, str]) -> str:
    return json.dumps(dict(fields), separators=(",", ":"))


def encode_trace_context(carrier: Mapping[str, str] | None) -> str | None:
    """A propagator's carrier (``traceparent``, ``tracestate``, ...) as the JSON text a task keeps, or None
    (nothing to keep). Fields that are not short printable ASCII are dropped, and so are those past
    :data:`MAX_TRACE_CONTEXT_CHARS` (``traceparent`` and ``tracestate`` first): never an error."""
    if not isinstance(carrier, Mapping):
        return None
    valid = {key: value for key, value in carrier.items()
             if _header_text(key, _MAX_TRACE_KEY_CHARS) and _header_text(value, MAX_TRACE_CONTEXT_CHARS)}
    order = [key for key in _FIRST_TRACE_FIELDS if key in valid] + sorted(set(valid) - set(_FIRST_TRACE_FIELDS))
    kept: dict[str, str] = {}
    for key in order:
        kept[key] = valid[key]
        if len(_as_json(kept)) > MAX_TRACE_CONTEXT_CHARS:
            del kept[key]
    return _as_json(kept) if kept else None


def decode_trace_context(text: object) -> dict[str, str] | None:
    """The carrier a task kept (:func:`encode_trace_context`'s text), or None for none or anything else."""
    if not isinstance(text, str) or not text or len(text) > MAX_TRACE_CONTEXT_CHARS:
        return None
    try:
        fields = json.loads(text)
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    carrier = {key: value for key, value in fields.items() if isinstance(key, str) and isinstance(value, str)}
    return carrier or None


class TaskError(MutexcronError):
    """Base class of the task queue's errors."""


class PayloadError(TaskError, ValueError):
    """The payload cannot be encoded as JSON (or the due time is naive); nothing was scheduled."""


class UnknownTaskType(TaskError, LookupError):
    """No handler is registered for a task type."""


class RetryLater(TaskError):
    """Raised by a handler that cannot run its task yet (not a failure): the task is delivered again after
    ``delay``, with no traceback logged; like a failure's retry, the new delivery counts as an attempt."""

    def __init__(self, delay: timedelta, why: str) -> None:
        super().__init__(why)
        self.delay = delay


@dataclass(frozen=True)
class NewTask:
    """A task on its way into a backend; ``payload`` is already JSON text, ``trace_context`` the JSON text of
    the W3C trace context of its ``schedule()`` call (:func:`encode_trace_context`), which the backend keeps
    with the task and gives back with each delivery."""

    id: str
    task_type: str
    payload: str
    run_at: datetime  # aware UTC
    trace_context: str | None = None

    def __post_init__(self) -> None:
        text = self.trace_context
        if text is not None and (not isinstance(text, str) or len(text) > MAX_TRACE_CONTEXT_CHARS):
            raise PayloadError(f"task {self.task_type!r}: trace_context must be JSON text of at most "
                               f"{MAX_TRACE_CONTEXT_CHARS} characters (encode_trace_context), not {text!r:.80}")


@dataclass(frozen=True)
class TaskInfo:
    """A task as the backend knows it now."""

    id: str
    task_type: str
    payload: object
    run_at: datetime
    status: TaskStatus
    attempts: int
    error: str | None = None

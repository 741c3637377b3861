"""What a delayed task is, in every backend: its id, type, JSON payload, due time and status."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from ..errors import MutexcronError

__all__ = ["NewTask", "PayloadError", "TaskError", "TaskInfo", "TaskStatus", "UnknownTaskType"]


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


class TaskError(MutexcronError):
    """Base class of the task queue's errors."""


class PayloadError(TaskError, ValueError):
    """The payload cannot be encoded as JSON (or the due time is naive); nothing was scheduled."""


class UnknownTaskType(TaskError, LookupError):
    """No handler is registered for a task type."""


@dataclass(frozen=True)
class NewTask:
    """A task on its way into a backend; ``payload`` is already JSON text."""

    id: str
    task_type: str
    payload: str
    run_at: datetime  # aware UTC


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

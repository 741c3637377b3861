"""Delayed one-off tasks: ``schedule`` now, run once at the due time by one worker; ``cancel`` before then.

What users call lives here: :class:`TaskQueue`, :func:`task_handler`, :class:`TaskStatus`, :class:`TaskInfo` and
the task errors. What backend authors need (the contracts and shared helpers) is in :mod:`mutexcron.tasks.backends`.
"""

from .backends.base import Delivery, TaskBackend
from .handlers import (
    DuplicateTaskHandler,
    Handler,
    HandlerRegistry,
    InvalidTaskType,
    TaskHandlerError,
    default_handlers,
    task_handler,
)
from .model import NewTask, PayloadError, RetryLater, TaskError, TaskInfo, TaskStatus, UnknownTaskType
from .queue import TaskQueue, backend_from_url

__all__ = [
    "Delivery",
    "DuplicateTaskHandler",
    "Handler",
    "HandlerRegistry",
    "InvalidTaskType",
    "NewTask",
    "PayloadError",
    "RetryLater",
    "TaskBackend",
    "TaskError",
    "TaskHandlerError",
    "TaskInfo",
    "TaskQueue",
    "TaskStatus",
    "UnknownTaskType",
    "backend_from_url",
    "default_handlers",
    "task_handler",
]

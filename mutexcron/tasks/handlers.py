"""Declaring task handlers: ``@task_handler("send-sms")`` registers a function for a task type."""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from .._options import duration
from ..errors import JobDefinitionError
from .model import TaskError, UnknownTaskType

__all__ = [
    "DuplicateTaskHandler",
    "Handler",
    "HandlerRegistry",
    "InvalidTaskType",
    "TaskHandlerError",
    "default_handlers",
    "task_handler",
    "validate_task_type",
]

F = TypeVar("F", bound=Callable[..., Any])
# A task type is a queue name in RabbitMQ and a key part in Redis: keep it plain.
_TYPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
_MICROSECOND = timedelta(microseconds=1)


class InvalidTaskType(UnknownTaskType, ValueError):
    """A task type that is not a valid name (an ``UnknownTaskType`` too, which is what was raised before)."""


class TaskHandlerError(JobDefinitionError, TaskError):
    """A bad ``@task_handler`` declaration: its options, or its function."""


class DuplicateTaskHandler(TaskHandlerError):
    """A second, different function declared for a task type that already has a handler."""


def validate_task_type(task_type: object) -> str:
    """``task_type`` if it is a valid task type name; InvalidTaskType otherwise."""
    if not isinstance(task_type, str) or not _TYPE_RE.fullmatch(task_type):
        raise InvalidTaskType(
            f"task type {task_type!r} is invalid: use 1-100 characters of letters, digits and _ . : - "
            "(starting with a letter or digit)"
        )
    return task_type


@dataclass(frozen=True)
class Handler:
    """How to run one task type: the function, how often to try, how long to back off between tries."""

    task_type: str
    func: Callable[[Any], Any]
    max_attempts: int = 5
    backoff: timedelta = timedelta(seconds=1)  # before the 2nd attempt; doubles each time
    max_backoff: timedelta = timedelta(hours=1)
    visibility_timeout: timedelta = timedelta(minutes=5)  # a claimed task returns after this if its worker dies

    def delay_before(self, attempt: int) -> timedelta:
        """The backoff before attempt number ``attempt`` (2, 3, ...): backoff * 2**(attempt - 2), capped by
        max_backoff. In whole microseconds, so that a late attempt's doubling never overflows a timedelta."""
        doubled = (self.backoff // _MICROSECOND) << min(max(0, attempt - 2), 80)  # 2**80 µs: ~38 billion years
        return min(self.max_backoff, timedelta(microseconds=min(doubled, self.max_backoff // _MICROSECOND)))


class HandlerRegistry:
    """Task types and their handlers; a worker runs the types it is given from its registry."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._lock = threading.Lock()

    def add(self, handler: Handler) -> None:
        with self._lock:
            existing = self._handlers.get(handler.task_type)
            if existing is not None and _where(existing.func) != _where(handler.func):
                raise DuplicateTaskHandler(
                    f"task type {handler.task_type!r} has two handlers: {_where(existing.func)} and "
                    f"{_where(handler.func)}"
                )
            self._handlers[handler.task_type] = handler

    def get(self, task_type: str) -> Handler:
        try:
            return self._handlers[task_type]
        except KeyError:
            known = ", ".join(sorted(self._handlers)) or "none"
            raise UnknownTaskType(f"no handler for task type {task_type!r} (registered: {known})") from None

    def remove(self, task_type: str) -> None:
        with self._lock:
            self._handlers.pop(task_type, None)

    def types(self) -> list[str]:
        return sorted(self._handlers)

    def __contains__(self, task_type: object) -> bool:
        return task_type in self._handlers


def _where(func: Callable[..., Any]) -> str:
    code = getattr(func, "__code__", None)
    place = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}{place}"


default_handlers = HandlerRegistry()


def task_handler(
    task_type: str,
    *,
    max_attempts: int = 5,
    backoff: timedelta = timedelta(seconds=1),
    max_backoff: timedelta = timedelta(hours=1),
    visibility_timeout: timedelta = timedelta(minutes=5),
    registry: HandlerRegistry | None = None,
) -> Callable[[F], F]:
    """Register ``func(payload)`` as the handler of ``task_type``; the function is returned unchanged."""
    if callable(task_type):
        raise TypeError(f"@task_handler needs the task type: write @task_handler(\"a.task-type\") above "
                        f"{_where(task_type)}, not a bare @task_handler")
    validate_task_type(task_type)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise TaskHandlerError(f"task type {task_type!r}: max_attempts must be an integer >= 1, not {max_attempts!r}")
    durations = {"backoff": backoff, "max_backoff": max_backoff, "visibility_timeout": visibility_timeout}
    for field, value in durations.items():  # a positive timedelta of at most a year, as every other option
        duration(value, what=f"task type {task_type!r}: {field}", error=TaskHandlerError, allow_zero=False,
                 seconds=False)

    def register(func: F) -> F:
        if not callable(func) or len(inspect.signature(func).parameters) < 1:
            raise TaskHandlerError(f"task type {task_type!r}: the handler must take the payload argument")
        handler = Handler(task_type, func, max_attempts, backoff, max_backoff, visibility_timeout)
        (registry if registry is not None else default_handlers).add(handler)
        return func

    return register

"""``MutexcronTaskBackend``: Django's own tasks (``django.tasks``, Django 6+) on this process's task queue.

Each ``django.tasks`` task is one mutexcron task of type :data:`TASK_TYPE`; its outcome (return value,
errors, worker ids, times) is kept with the task's record through the queue backend's
``store_result``/``load_result``, so it lives and expires with the task. How results map to statuses,
and what is not supported: ``docs/django-tasks.md``. Import it from :mod:`mutexcron_django.tasks`.
"""

from __future__ import annotations

import json
import logging
import traceback
import uuid
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from mutexcron.backend_helpers import as_utc
from mutexcron.tasks import NewTask, PayloadError, TaskQueue, TaskStatus, task_handler
from mutexcron.tasks.model import decode_result, encode_result

from .queue import get_task_queue

try:  # Django 6.0+
    from django.tasks import Task as DjangoTask
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError as DjangoTaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    HAS_DJANGO_TASKS = True
except ImportError:  # Django 5.2: no django.tasks; get_task_queue() and the worker work all the same
    HAS_DJANGO_TASKS = False

__all__ = ["HAS_DJANGO_TASKS", "TASK_TYPE", "MutexcronTaskBackend", "TaskAbandoned", "TaskCancelled", "cancel"]

logger = logging.getLogger("mutexcron.django.tasks")

TASK_TYPE = "django.tasks"  # the mutexcron task type of every django.tasks task
PAYLOAD_VERSION = 1


class TaskCancelled(Exception):
    """In ``TaskResult.errors``: the task was cancelled before it ran."""

    __module__ = "mutexcron_django.tasks"  # its public home (results name it by that path, as before the split)


class TaskAbandoned(Exception):
    """In ``TaskResult.errors``: an attempt ended without the task's own exception (its worker died, or hung
    past the visibility timeout, or the queue gave up on it); the traceback holds the queue's reason."""

    __module__ = "mutexcron_django.tasks"


# -- where a django.tasks outcome is kept: with the mutexcron task's own record -----------------------------


def _now_text() -> str:
    return datetime.now(UTC).isoformat()


def _load_outcome(queue: TaskQueue, task_id: str) -> dict[str, Any]:
    return decode_result(queue.backend.load_result(task_id))


def _store_outcome(queue: TaskQueue, task_id: str, outcome: dict[str, Any]) -> None:
    if not queue.backend.store_result(task_id, encode_result(outcome)):
        logger.warning("task %s: its record is gone; its django.tasks outcome was not kept", task_id)


# -- cancelling ---------------------------------------------------------------------------------------------


def cancel(result: Any) -> bool:
    """Cancel the task of a ``TaskResult`` of a :class:`MutexcronTaskBackend`: True if it will now never run
    (False if it started, finished, was already cancelled, or is unknown). Refresh the result to see it."""
    backend = result.task.get_backend()
    if not isinstance(backend, MutexcronTaskBackend):
        raise TypeError(f"cancel() needs a result of a MutexcronTaskBackend, not of {type(backend).__name__} "
                        f"(alias {result.backend!r})")
    return backend.cancel(result.id)


# -- the django.tasks backend (Django 6+) -------------------------------------------------------------------

if HAS_DJANGO_TASKS:

    def _aware(value: datetime) -> datetime:
        """A user's time as aware UTC: with USE_TZ = False, naive datetimes are in the default time zone (not UTC)."""
        if timezone.is_naive(value):
            value = timezone.make_aware(value, timezone.get_default_timezone())
        return as_utc(value)

    def _shown(text: object) -> datetime | None:
        """A stored time as Django gives times: aware with USE_TZ, naive local time without."""
        if not isinstance(text, str) or not text:
            return None
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value if settings.USE_TZ else timezone.make_naive(value, timezone.get_default_timezone())

    def _load_task(payload: dict[str, Any]) -> DjangoTask[..., Any]:
        """The Task a payload names, with the options it was enqueued with."""
        from django.utils.module_loading import import_string

        path = payload.get("task")
        try:
            found = import_string(path) if isinstance(path, str) else None
        except (ImportError, AttributeError) as error:
            raise InvalidTask(f"Expected {path!r} to point to a Task instance: {error}") from error
        if not isinstance(found, DjangoTask):
            raise InvalidTask(f"Expected {path!r} to point to a Task instance (a function decorated with @task).")
        run_after = _shown(payload.get("run_after"))
        return found.using(
            priority=payload.get("priority"),
            queue_name=payload.get("queue_name"),
            run_after=run_after,
            backend=payload.get("backend"),
        )

    def _errors(outcome: dict[str, Any]) -> list[DjangoTaskError]:
        return [
            DjangoTaskError(exception_class_path=str(error.get("exception_class_path", "")),
                            traceback=str(error.get("traceback", "")))
            for error in outcome.get("errors", [])
            if isinstance(error, dict)
        ]

    def _path_of(error: BaseException) -> str:
        return f"{type(error).__module__}.{type(error).__qualname__}"

    class MutexcronTaskBackend(BaseTaskBackend):
        """Django's tasks on mutexcron's delayed task queue (``MUTEXCRON["TASKS"]``); see the module docstring."""

        supports_defer = True
        supports_get_result = True
        supports_async_task = True  # the worker calls Task.call(), which runs a coroutine to completion
        supports_priority = False

        def __init__(self, alias: str, params: dict[str, Any]) -> None:
            super().__init__(alias, params)
            if self.options:
                raise ImproperlyConfigured(
                    f"TASKS[{alias!r}]['OPTIONS']: MutexcronTaskBackend takes no options (given "
                    f"{sorted(self.options)}); its queue is configured by MUTEXCRON['TASKS']"
                )

        @property
        def queue(self) -> TaskQueue:
            return get_task_queue()

        def enqueue(self, task: DjangoTask[..., Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
            self.validate_task(task)
            args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
            task_id = uuid.uuid4().hex
            enqueued_at = datetime.now(UTC)
            run_at = _aware(task.run_after) if task.run_after is not None else enqueued_at
            payload = {
                "v": PAYLOAD_VERSION,
                "id": task_id,  # the worker keeps the outcome under it
                "task": task.module_path,
                "args": args,
                "kwargs": kwargs,
                "backend": self.alias,
                "queue_name": task.queue_name,
                "priority": task.priority,
                "run_after": run_at.isoformat() if task.run_after is not None else None,
                "enqueued_at": enqueued_at.isoformat(),
            }
            try:
                text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
            except ValueError as error:
                raise PayloadError(f"task {task.module_path}: arguments are not JSON: {error}") from None
            queue = self.queue
            queue.backend.enqueue([NewTask(id=task_id, task_type=TASK_TYPE, payload=text, run_at=run_at,
                                           trace_context=queue.trace_context())])
            result: TaskResult[Any, Any] = TaskResult(
                task=task, id=task_id, status=TaskResultStatus.READY, enqueued_at=_shown(payload["enqueued_at"]),
                started_at=None, finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
                backend=self.alias, errors=[], worker_ids=[],
            )
            task_enqueued.send(type(self), task_result=result)
            return result

        def get_result(self, result_id: str) -> TaskResult[Any, Any]:
            queue = self.queue
            info = queue.info(result_id) if isinstance(result_id, str) and result_id else None
            payload = info.payload if info is not None else None
            if info is None or info.task_type != TASK_TYPE or not isinstance(payload, dict):
                raise TaskResultDoesNotExist(result_id)
            outcome = _load_outcome(queue, result_id)
            status = {
                TaskStatus.SCHEDULED: TaskResultStatus.READY,
                # RUNNING from the write that stamps its start: a task claimed by a worker that has not begun it
                # yet is still READY, so that a RUNNING result always has its started_at.
                TaskStatus.RUNNING: TaskResultStatus.RUNNING if outcome.get("started_at") else TaskResultStatus.READY,
                TaskStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
            }.get(info.status, TaskResultStatus.FAILED)
            errors = _errors(outcome)
            worker_ids = [str(worker) for worker in outcome.get("worker_ids", [])]
            if info.status is TaskStatus.CANCELLED:
                errors.append(DjangoTaskError(
                    exception_class_path=_path_of(TaskCancelled()),
                    traceback=f"{_path_of(TaskCancelled())}: task {result_id} was cancelled before it ran\n",
                ))
            elif info.status is TaskStatus.FAILED and len(errors) < max(1, len(worker_ids)):
                # The last attempt ended without an exception of the task's own: its worker died, or the
                # queue gave up on it (the error then says why), or the backend keeps no outcome.
                errors.append(DjangoTaskError(
                    exception_class_path=_path_of(TaskAbandoned()),
                    traceback=info.error or "the task failed without an error of its own\n",
                ))
            result: TaskResult[Any, Any] = TaskResult(
                task=_load_task(payload), id=result_id, status=status,
                enqueued_at=_shown(payload.get("enqueued_at")), started_at=_shown(outcome.get("started_at")),
                finished_at=_shown(outcome.get("finished_at")) if status in (
                    TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED) else None,
                last_attempted_at=_shown(outcome.get("last_attempted_at")),
                args=payload.get("args", []), kwargs=payload.get("kwargs", {}), backend=str(payload.get("backend")),
                errors=errors, worker_ids=worker_ids,
            )
            if status == TaskResultStatus.SUCCESSFUL:
                object.__setattr__(result, "_return_value", outcome.get("return_value"))
            return result

        def cancel(self, result_id: str) -> bool:
            """True if the task will now never run; False if it started, finished, or is unknown."""
            return self.queue.cancel(result_id)

    def _running_result(task: DjangoTask[..., Any], payload: dict[str, Any],
                        outcome: dict[str, Any]) -> TaskResult[Any, Any]:
        return TaskResult(
            task=task, id=payload["id"], status=TaskResultStatus.RUNNING,
            enqueued_at=_shown(payload.get("enqueued_at")), started_at=_shown(outcome.get("started_at")),
            finished_at=None, last_attempted_at=_shown(outcome.get("last_attempted_at")),
            args=payload.get("args", []), kwargs=payload.get("kwargs", {}), backend=str(payload.get("backend")),
            errors=_errors(outcome), worker_ids=[str(worker) for worker in outcome.get("worker_ids", [])],
        )

    def _finish(result: TaskResult[Any, Any] | None, sender: type | None, status: TaskResultStatus,
                outcome: dict[str, Any], error: DjangoTaskError | None = None) -> None:
        if result is None or sender is None:
            return
        object.__setattr__(result, "status", status)
        object.__setattr__(result, "finished_at", _shown(outcome.get("finished_at")))
        if error is not None:
            result.errors.append(error)
        else:
            object.__setattr__(result, "_return_value", outcome.get("return_value"))
        task_finished.send(sender, task_result=result)

    @task_handler(TASK_TYPE, max_attempts=1)
    def run_django_task(payload: dict[str, Any]) -> None:
        """Run one ``django.tasks`` task in a worker, and keep its outcome in the task's record."""
        if not isinstance(payload, dict) or not isinstance(payload.get("id"), str):
            raise InvalidTask(f"not a django.tasks payload: {payload!r}")
        queue = get_task_queue()
        task_id = payload["id"]
        outcome = _load_outcome(queue, task_id)
        now = _now_text()
        outcome.setdefault("started_at", now)
        outcome["last_attempted_at"] = now
        outcome.setdefault("worker_ids", []).append(queue.worker_id)
        outcome.pop("return_value", None)
        outcome.pop("finished_at", None)
        _store_outcome(queue, task_id, outcome)

        result: TaskResult[Any, Any] | None = None
        sender: type | None = None
        try:
            task = _load_task(payload)
            sender = type(task.get_backend())
            result = _running_result(task, payload, outcome)
            task_started.send(sender, task_result=result)
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
            else:
                value = task.call(*result.args, **result.kwargs)
            # Inside the try, as Django's worker does: a return value that is not JSON fails the task.
            value = normalize_json(value)
            json.dumps(value, allow_nan=False)
        except BaseException as error:  # KeyboardInterrupt and SystemExit too: they fail this task, not the worker
            outcome["finished_at"] = _now_text()
            failure = {"exception_class_path": _path_of(error), "traceback": "".join(traceback.format_exception(error))}
            outcome.setdefault("errors", []).append(failure)
            _store_outcome(queue, task_id, outcome)
            _finish(result, sender, TaskResultStatus.FAILED, outcome, DjangoTaskError(**failure))
            if isinstance(error, Exception):
                raise
            raise RuntimeError(f"task {payload.get('task')} raised {_path_of(error)}") from error
        outcome["finished_at"] = _now_text()
        outcome["return_value"] = value
        _store_outcome(queue, task_id, outcome)
        _finish(result, sender, TaskResultStatus.SUCCESSFUL, outcome)

else:

    class MutexcronTaskBackend:  # type: ignore[no-redef]
        """``django.tasks`` needs Django 6.0 or later; this Django has none."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            import django

            raise ImproperlyConfigured(
                f"mutexcron_django.tasks.MutexcronTaskBackend is a django.tasks backend: it needs Django 6.0 or "
                f"later (this is Django {django.get_version()}). get_task_queue() works on any Django."
            )

        def cancel(self, result_id: str) -> bool:
            raise NotImplementedError

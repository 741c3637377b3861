"""Delayed tasks in Django: the process's TaskQueue from settings, and a ``django.tasks`` backend (Django 6+).

``get_task_queue()`` is this process's :class:`~mutexcron.tasks.TaskQueue`, built from
``MUTEXCRON["TASKS"]`` on first use (again after a fork, or when the setting changes), with the handlers
that ``@task_handler`` declared in the apps' ``tasks`` modules. Its workers run every handler between
``close_old_connections()`` calls, as Django does around a request, so a long-lived worker survives
database connections that died or outlived ``CONN_MAX_AGE``::

    from mutexcron_django.tasks import get_task_queue

    task_id = get_task_queue().schedule("send-sms", {"to": "+33…"}, delay=timedelta(minutes=10))
    get_task_queue().cancel(task_id)

``MutexcronTaskBackend`` runs Django's own tasks (``django.tasks``, Django 6+) on that queue::

    TASKS = {"default": {"BACKEND": "mutexcron_django.tasks.MutexcronTaskBackend"}}

    @task
    def send_report(user_id: int) -> str: ...

    result = send_report.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(42)
    send_report.get_result(result.id).status        # READY, RUNNING, SUCCESSFUL, FAILED
    mutexcron_django.tasks.cancel(result)            # True: it will never run

- ``enqueue`` schedules one mutexcron task of type ``"django.tasks"`` (:data:`TASK_TYPE`) whose JSON
  payload holds the task's import path, args, kwargs, backend alias, queue name, priority and
  ``run_after``, which becomes the due time. The result id is the mutexcron task id, so the admin's
  *Scheduled tasks* page, ``TaskQueue.status()``/``cancel()``/``retry()`` all work on it.
- ``manage.py mutexcron worker`` runs them (on Django 6 the ``django.tasks`` type is registered with the
  project's own types; ``--types django.tasks`` runs only them). The worker imports the task by its path,
  calls it (``Task.call``, so ``async def`` tasks work, and ``takes_context`` tasks get a ``TaskContext``),
  sends ``task_started`` / ``task_finished``, and records the outcome.
- A task is tried once, as Django's backends do: an exception makes it FAILED, with the exception's
  class and traceback in ``result.errors``. ``TaskQueue.retry(result.id)`` (or the admin's *retry*)
  runs a failed task again; the result then lists one worker id and one error per attempt.
- ``get_result(id)``: ``scheduled`` is READY, ``running`` RUNNING, ``succeeded`` SUCCESSFUL (with the
  return value, JSON-normalised as Django does), ``failed`` FAILED, ``cancelled`` FAILED with a
  :class:`TaskCancelled` error; an unknown id (or a record past the backend's retention: 7 days after
  the task finished, for Redis) raises ``TaskResultDoesNotExist``.
- Return values, errors, worker ids and start/finish times are kept in the mutexcron task's own record:
  a field of the task's hash in the Redis backend, of the task's record in a Redis cancel store
  (RabbitMQ), or through a backend's (or cancel store's) ``store_result(id, text) -> bool`` /
  ``load_result(id) -> str | None`` methods (the ``django://`` backend and cancel store: a column of the
  task's row). A backend with neither keeps no outcome: its results still have the right status, but a
  SUCCESSFUL one returns ``None``, and a FAILED one has only the error the queue recorded (as a
  :class:`TaskAbandoned`).
- ``django.tasks`` has no cancel API: ``MutexcronTaskBackend.cancel(result_id)`` and
  :func:`cancel(result) <cancel>` return True when the task will now never run.
- Not supported: priorities (``supports_priority = False``: the queue runs tasks by due time). Queue
  names are checked against the alias's ``QUEUES`` as Django does and recorded in the payload, but all
  run in the one ``django.tasks`` type. ``OPTIONS`` takes no keys: the backend is MUTEXCRON["TASKS"]'s.
- Enqueue inside a transaction runs the task even if the transaction rolls back, and possibly before it
  commits (except on the ``django://`` backend, whose rows are part of the transaction): use
  ``transaction.on_commit(lambda: my_task.enqueue(...))``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils import timezone

from mutexcron.errors import StoreUnavailable
from mutexcron.tasks import (
    Handler,
    HandlerRegistry,
    NewTask,
    PayloadError,
    TaskBackend,
    TaskQueue,
    TaskStatus,
    default_handlers,
    task_handler,
)

from .conf import get_settings

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

logger = logging.getLogger("mutexcron.django.tasks")

TASK_TYPE = "django.tasks"  # the mutexcron task type of every django.tasks task
RESULT_FIELD = "django_result"  # the field of a task's record where its django.tasks outcome is kept
PAYLOAD_VERSION = 1

__all__ = [
    "HAS_DJANGO_TASKS",
    "TASK_TYPE",
    "DjangoHandlers",
    "MutexcronTaskBackend",
    "ResultSlot",
    "TaskAbandoned",
    "TaskCancelled",
    "cancel",
    "get_task_queue",
    "reset_task_queue",
    "result_slot",
]


class TaskCancelled(Exception):
    """In ``TaskResult.errors``: the task was cancelled before it ran."""


class TaskAbandoned(Exception):
    """In ``TaskResult.errors``: an attempt ended without the task's own exception (its worker died, or hung
    past the visibility timeout, or the queue gave up on it); the traceback holds the queue's reason."""


# -- the process's queue ----------------------------------------------------------------------------------


@contextmanager
def _fresh_connections() -> Iterator[None]:
    from django.db import close_old_connections

    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()


def _with_fresh_connections(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def run(payload: Any) -> Any:
        with _fresh_connections():
            return func(payload)

    run.__wrapped__ = func  # type: ignore[attr-defined]
    return run


class DjangoHandlers(HandlerRegistry):
    """A view of a registry (default: the one ``@task_handler`` fills) whose handlers run between
    ``close_old_connections()`` calls (unless ``fresh_connections`` is off: the ``django://`` backend's
    workers do that themselves around each claim). Handlers declared later are seen too."""

    def __init__(self, registry: HandlerRegistry | None = None, *, fresh_connections: bool = True) -> None:
        super().__init__()
        self.registry = registry if registry is not None else default_handlers
        self.fresh_connections = fresh_connections

    def add(self, handler: Handler) -> None:
        self.registry.add(handler)

    def get(self, task_type: str) -> Handler:
        handler = self.registry.get(task_type)
        if not self.fresh_connections:
            return handler
        return replace(handler, func=_with_fresh_connections(handler.func))

    def remove(self, task_type: str) -> None:
        self.registry.remove(task_type)

    def types(self) -> list[str]:
        return self.registry.types()

    def __contains__(self, task_type: object) -> bool:
        return task_type in self.registry


def _manages_connections(backend: TaskBackend) -> bool:
    """Whether the backend's workers close stale Django connections themselves (the ``django://`` one)."""
    return type(backend).__module__ == "mutexcron_django.tasks_backend"


_lock = threading.Lock()
_queue: TaskQueue | None = None
_queue_pid: int | None = None


def get_task_queue() -> TaskQueue:
    """This process's TaskQueue, from ``MUTEXCRON["TASKS"]`` (a forked child builds its own).

    Raises ImproperlyConfigured for a bad setting; building connects to nothing."""
    global _queue, _queue_pid
    with _lock:
        if _queue is None or _queue_pid != os.getpid():
            handlers = DjangoHandlers()
            _queue = get_settings().tasks.build_queue(handlers=handlers)
            handlers.fresh_connections = not _manages_connections(_queue.backend)
            _queue_pid = os.getpid()
        return _queue


def reset_task_queue() -> None:
    """Close this process's queue (stopping its background worker, if any); the next use builds a new one."""
    global _queue
    with _lock:
        queue = _queue if _queue_pid == os.getpid() else None
        _queue = None
    if queue is not None:
        try:
            queue.close()
        except Exception:  # closing must not fail a settings change or a test's teardown
            logger.exception("closing the task queue failed")


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    if setting == "MUTEXCRON":
        reset_task_queue()


setting_changed.connect(_on_setting_changed, dispatch_uid="mutexcron-task-queue")


# -- where a django.tasks outcome is kept: in the mutexcron task's own record ------------------------------

# Set a field of an existing hash only: a record that expired (or was never there) is not brought back
# as a key without expiry.
_SET_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


class ResultSlot:
    """Reads and writes one JSON text per task next to the task's record; this base keeps nothing."""

    supported = False

    def load(self, task_id: str) -> str | None:
        return None

    def store(self, task_id: str, text: str) -> bool:
        return False


class _MethodSlot(ResultSlot):
    """A backend (or cancel store) with ``store_result(id, text) -> bool`` and ``load_result(id) -> str | None``."""

    supported = True

    def __init__(self, owner: Any) -> None:
        self.owner = owner

    def load(self, task_id: str) -> str | None:
        return self.owner.load_result(task_id)

    def store(self, task_id: str, text: str) -> bool:
        return bool(self.owner.store_result(task_id, text))


class _RedisHashSlot(ResultSlot):
    """A field of the task's Redis hash: it expires with the record, and a retry keeps it."""

    supported = True

    def __init__(self, client: Any, key: Callable[[str], str], where: str) -> None:
        self.client = client
        self.key = key
        self.where = where
        self._set = client.register_script(_SET_IF_EXISTS)

    def _call(self, operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        import redis

        try:
            return operation(*args, **kwargs)
        except redis.RedisError as error:
            raise StoreUnavailable(f"{self.where}: cannot read or write a task's result: {error}") from error

    def load(self, task_id: str) -> str | None:
        value = self._call(self.client.hget, self.key(task_id), RESULT_FIELD)
        return value.decode() if isinstance(value, bytes) else value

    def store(self, task_id: str, text: str) -> bool:
        return bool(self._call(self._set, keys=[self.key(task_id)], args=[RESULT_FIELD, text]))


def result_slot(backend: TaskBackend) -> ResultSlot:
    """Where ``backend`` can keep a task's outcome (see the module docstring)."""
    if callable(getattr(backend, "store_result", None)) and callable(getattr(backend, "load_result", None)):
        return _MethodSlot(backend)
    try:
        from mutexcron.tasks.backends.redis import RedisTaskBackend
    except ImportError:  # redis-py is not installed: then it is not a Redis backend either
        pass
    else:
        if isinstance(backend, RedisTaskBackend):
            return _RedisHashSlot(backend.client, backend.task_key, repr(backend))
    marks = getattr(backend, "marks", None)  # a broker backend's record store (RabbitMQ)
    if marks is not None:
        if callable(getattr(marks, "store_result", None)) and callable(getattr(marks, "load_result", None)):
            return _MethodSlot(marks)
        from mutexcron.tasks.cancel_marks import RedisCancelMarks

        if isinstance(marks, RedisCancelMarks):
            return _RedisHashSlot(marks.client, marks.key, repr(marks))
    return ResultSlot()


_slots: dict[int, tuple[TaskBackend, ResultSlot]] = {}


def _slot_of(queue: TaskQueue) -> ResultSlot:
    backend = queue.backend
    known = _slots.get(id(backend))
    if known is None or known[0] is not backend:
        known = (backend, result_slot(backend))
        _slots.clear()  # one queue per process: keep only the current backend's
        _slots[id(backend)] = known
    return known[1]


def _now_text() -> str:
    return datetime.now(UTC).isoformat()


def _load_outcome(slot: ResultSlot, task_id: str) -> dict[str, Any]:
    text = slot.load(task_id)
    if not text:
        return {}
    try:
        outcome = json.loads(text)
    except ValueError:
        return {}
    return outcome if isinstance(outcome, dict) else {}


def _store_outcome(slot: ResultSlot, task_id: str, outcome: dict[str, Any]) -> None:
    if slot.supported and not slot.store(task_id, json.dumps(outcome, separators=(",", ":"))):
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
        if timezone.is_naive(value):  # USE_TZ = False: naive datetimes are in the default time zone
            value = timezone.make_aware(value, timezone.get_default_timezone())
        return value.astimezone(UTC)

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

    def _load_task(payload: dict[str, Any]) -> DjangoTask:
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

        def enqueue(self, task: DjangoTask, args: Any, kwargs: Any) -> TaskResult:
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
            self.queue.backend.enqueue([NewTask(id=task_id, task_type=TASK_TYPE, payload=text, run_at=run_at)])
            result = TaskResult(
                task=task, id=task_id, status=TaskResultStatus.READY, enqueued_at=_shown(payload["enqueued_at"]),
                started_at=None, finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
                backend=self.alias, errors=[], worker_ids=[],
            )
            task_enqueued.send(type(self), task_result=result)
            return result

        def get_result(self, result_id: str) -> TaskResult:
            queue = self.queue
            info = queue.info(result_id) if isinstance(result_id, str) and result_id else None
            payload = info.payload if info is not None else None
            if info is None or info.task_type != TASK_TYPE or not isinstance(payload, dict):
                raise TaskResultDoesNotExist(result_id)
            outcome = _load_outcome(_slot_of(queue), result_id)
            status = {
                TaskStatus.SCHEDULED: TaskResultStatus.READY,
                TaskStatus.RUNNING: TaskResultStatus.RUNNING,
                TaskStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
            }.get(info.status, TaskResultStatus.FAILED)
            errors = _errors(outcome)
            worker_ids = [str(worker) for worker in outcome.get("worker_ids", [])]
            if info.status is TaskStatus.CANCELLED:
                errors.append(DjangoTaskError(
                    exception_class_path=_path_of(TaskCancelled()),
                    traceback=f"{__name__}.TaskCancelled: task {result_id} was cancelled before it ran\n",
                ))
            elif info.status is TaskStatus.FAILED and len(errors) < max(1, len(worker_ids)):
                # The last attempt ended without an exception of the task's own: its worker died, or the
                # queue gave up on it (the error then says why), or the backend keeps no outcome.
                errors.append(DjangoTaskError(
                    exception_class_path=_path_of(TaskAbandoned()),
                    traceback=info.error or "the task failed without an error of its own\n",
                ))
            result = TaskResult(
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

    def _running_result(task: DjangoTask, payload: dict[str, Any], outcome: dict[str, Any]) -> TaskResult:
        return TaskResult(
            task=task, id=payload["id"], status=TaskResultStatus.RUNNING,
            enqueued_at=_shown(payload.get("enqueued_at")), started_at=_shown(outcome.get("started_at")),
            finished_at=None, last_attempted_at=_shown(outcome.get("last_attempted_at")),
            args=payload.get("args", []), kwargs=payload.get("kwargs", {}), backend=str(payload.get("backend")),
            errors=_errors(outcome), worker_ids=[str(worker) for worker in outcome.get("worker_ids", [])],
        )

    def _finish(result: TaskResult | None, sender: type | None, status: TaskResultStatus,
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
        slot = _slot_of(queue)
        task_id = payload["id"]
        outcome = _load_outcome(slot, task_id)
        now = _now_text()
        outcome.setdefault("started_at", now)
        outcome["last_attempted_at"] = now
        outcome.setdefault("worker_ids", []).append(queue.worker_id)
        outcome.pop("return_value", None)
        outcome.pop("finished_at", None)
        _store_outcome(slot, task_id, outcome)

        result: TaskResult | None = None
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
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            outcome["finished_at"] = _now_text()
            failure = {"exception_class_path": _path_of(error), "traceback": "".join(traceback.format_exception(error))}
            outcome.setdefault("errors", []).append(failure)
            _store_outcome(slot, task_id, outcome)
            _finish(result, sender, TaskResultStatus.FAILED, outcome, DjangoTaskError(**failure))
            if isinstance(error, Exception):
                raise
            raise RuntimeError(f"task {payload.get('task')} raised {_path_of(error)}") from error
        outcome["finished_at"] = _now_text()
        outcome["return_value"] = value
        _store_outcome(slot, task_id, outcome)
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

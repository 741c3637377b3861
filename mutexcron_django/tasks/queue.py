"""This process's :class:`~mutexcron.tasks.TaskQueue`, built from ``MUTEXCRON["TASKS"]`` on first use.

Built again after a fork or when the setting changes, with the handlers that ``@task_handler`` declared in
the apps' ``tasks`` modules; its workers run every handler between ``close_old_connections()`` calls, as
Django does around a request, so a long-lived worker survives database connections that died or aged.
Import it from :mod:`mutexcron_django.tasks`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.core.signals import setting_changed

from mutexcron.tasks import Handler, HandlerRegistry, TaskQueue, default_handlers

from ..conf import get_settings
from ..per_process import PerProcess, fresh_connections

__all__ = ["DjangoHandlers", "get_task_queue", "reset_task_queue"]

logger = logging.getLogger("mutexcron.django.tasks")


def _with_fresh_connections(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def run(payload: Any) -> Any:
        with fresh_connections():
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


def _build_queue() -> TaskQueue:
    handlers = DjangoHandlers()
    queue = get_settings().tasks.build_queue(handlers=handlers)
    handlers.fresh_connections = not queue.backend.manages_connections
    return queue


_queue = PerProcess(_build_queue)


def get_task_queue() -> TaskQueue:
    """This process's TaskQueue, from ``MUTEXCRON["TASKS"]`` (a forked child builds its own).

    Raises ImproperlyConfigured for a bad setting; building connects to nothing."""
    return _queue.get()


def reset_task_queue() -> None:
    """Close this process's queue (stopping its background worker, if any); the next use builds a new one."""
    queue = _queue.take()
    if queue is not None:
        try:
            queue.close()
        except Exception:  # closing must not fail a settings change or a test's teardown
            logger.exception("closing the task queue failed")


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    if setting == "MUTEXCRON":
        reset_task_queue()


setting_changed.connect(_on_setting_changed, dispatch_uid="mutexcron-task-queue")

"""Delayed tasks in Django: this process's TaskQueue from settings, and a ``django.tasks`` backend (Django 6+).

The app's own ``tasks`` module (autodiscovered, so the ``django.tasks`` handler is registered with the
project's types) and the documented import path of both halves::

    task_id = get_task_queue().schedule("send-sms", {"to": "+33…"}, delay=timedelta(minutes=10))
    TASKS = {"default": {"BACKEND": "mutexcron_django.tasks.MutexcronTaskBackend"}}

The queue lives in :mod:`mutexcron_django.tasks.queue`, the ``django.tasks`` backend in
:mod:`mutexcron_django.tasks.backend` (how it maps results: ``docs/django-tasks.md``).
"""

from __future__ import annotations

from .backend import (
    HAS_DJANGO_TASKS,
    TASK_TYPE,
    MutexcronTaskBackend,
    TaskAbandoned,
    TaskCancelled,
    cancel,
)
from .queue import DjangoHandlers, get_task_queue, reset_task_queue

__all__ = [
    "HAS_DJANGO_TASKS",
    "TASK_TYPE",
    "DjangoHandlers",
    "MutexcronTaskBackend",
    "TaskAbandoned",
    "TaskCancelled",
    "cancel",
    "get_task_queue",
    "reset_task_queue",
]

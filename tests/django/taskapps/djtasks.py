"""``django.tasks`` tasks (Django 6+ only) of tests/django/test_django_tasks_framework.py.

Each appends what it did to ``calls`` (in the process that runs it) and to $MUTEXCRON_TEST_TASKS_OUTPUT if set.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from django.tasks import TaskContext, task

calls: list[tuple[str, Any]] = []


def _record(name: str, value: Any) -> None:
    calls.append((name, value))
    path = os.environ.get("MUTEXCRON_TEST_TASKS_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as output:
            output.write(f"{name} {value!r}\n")


@task
def add(a: int, b: int, *, label: str = "sum") -> dict[str, Any]:
    _record("add", (a, b, label))
    return {"label": label, "total": a + b, "pair": (a, b)}  # the tuple comes back as a JSON list


@task
def explode(message: str) -> None:
    _record("explode", message)
    raise ValueError(message)


@task(takes_context=True)
def with_context(context: TaskContext, tag: str) -> dict[str, Any]:
    _record("with_context", tag)
    return {"id": context.task_result.id, "attempt": context.attempt, "tag": tag,
            "status": str(context.task_result.status)}


@task
async def asleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    _record("asleep", seconds)
    return "awake"


@task
def not_json() -> object:
    _record("not_json", None)
    return object()


@task
def interrupt() -> None:
    _record("interrupt", None)
    raise KeyboardInterrupt

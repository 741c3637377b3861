"""Handlers of the worker tests; each appends a line to $MUTEXCRON_TEST_TASKS_OUTPUT (if set)."""

from __future__ import annotations

import os
import time
from typing import Any

from mutexcron.tasks import task_handler


def write(line: str) -> None:
    path = os.environ.get("MUTEXCRON_TEST_TASKS_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as output:
            output.write(line + "\n")


@task_handler("handlerapp.echo")
def echo(payload: Any) -> None:
    write(f"echo {payload}")


@task_handler("handlerapp.slow")
def slow(payload: Any) -> None:
    """Takes a while, so that a stopping worker finds it running and has to wait for it."""
    write(f"slow-start {payload}")
    time.sleep(float(os.environ.get("MUTEXCRON_TEST_TASKS_SLOW_SECONDS", "1.5")))
    write(f"slow-end {payload}")

"""Declaring jobs into ``mutexcron.default_registry`` for one test, and polling with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mutexcron import default_registry, mutex_cron


def noop() -> None:
    """A job body that does nothing."""


class Declarations:
    """Declares jobs into the default registry (where the Django app looks) and removes them afterwards."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, spec: str, func: Callable[..., Any] = noop, *, name: str, **options: Any) -> str:
        mutex_cron(spec, name=name, **options)(func)
        self.names.append(name)
        return name

    def remove_all(self) -> None:
        for name in self.names:
            default_registry.remove(name)
        self.names.clear()


def wait_for(condition: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)

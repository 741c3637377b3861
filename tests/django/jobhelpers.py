"""Declaring jobs into ``mutexcron.default_registry`` for one test, and polling with a deadline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mutexcron import default_registry, mutex_cron
from tests.support import wait_until


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
    """:func:`tests.support.wait_until` with room for Django processes to start (15 s by default)."""
    return wait_until(condition, timeout, what, interval=0.05)

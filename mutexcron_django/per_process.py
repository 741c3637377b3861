"""What the app keeps once per process (its scheduler, its task queue), and the connection hygiene that
long-lived threads need: both shared by ``runtime`` and ``tasks.queue``."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from django import db

__all__ = ["PerProcess", "fresh_connections"]

T = TypeVar("T")


@contextmanager
def fresh_connections() -> Iterator[None]:
    """Around each fire or task: drop connections that died or outlived CONN_MAX_AGE, as Django does per
    request. Long-lived threads otherwise hit "server has gone away" (django-apscheduler's top bug)."""
    db.close_old_connections()  # looked up at each call, so that tests can watch it
    try:
        yield
    finally:
        db.close_old_connections()


class PerProcess(Generic[T]):
    """One object per process, built by ``build()`` on first use; a forked child builds its own (threads and
    connections do not survive a fork)."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self.lock = threading.Lock()  # also held by callers that must act on the object atomically
        self._value: T | None = None
        self._pid: int | None = None

    def get(self) -> T:
        with self.lock:
            if self._value is None or self._pid != os.getpid():
                self._value, self._pid = self._build(), os.getpid()
            return self._value

    def peek(self) -> T | None:
        """This process's object if it was built (None otherwise, or if it is the parent's): builds nothing."""
        with self.lock:
            return self._value if self._pid == os.getpid() else None

    def take(self) -> T | None:
        """Forget this process's object and return it (None if there is none, or it is the parent's)."""
        with self.lock:
            value = self._value if self._pid == os.getpid() else None
            self._value = None
        return value

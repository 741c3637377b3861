"""The callbacks a scheduler tells about its runs: ``"started"`` when a body starts, ``"finished"`` for every
run or skip (each with a :class:`RunRecord`); ``"overdue"``, ``"failing"`` and ``"recovered"`` once per
incident fleet-wide (with an :class:`~mutexcron.ops.alerts.Alert`). A failing callback is logged, never raised."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from .records import RunRecord

if TYPE_CHECKING:
    from .ops.alerts import Alert

__all__ = ["LISTENER_EVENTS", "Listener", "Listeners"]

logger = logging.getLogger("mutexcron.scheduler")
Listener = Callable[[Any], Any]  # gets a RunRecord ("started", "finished") or an Alert (the others)
LISTENER_EVENTS = ("started", "finished", "overdue", "failing", "recovered", "paused")


class Listeners:
    """The registered callbacks, each with the events it asked for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[tuple[Listener, frozenset[str]]] = []

    def add(self, callback: Listener, events: Collection[str]) -> Listener:
        unknown = set(events) - set(LISTENER_EVENTS)
        if unknown:
            raise ValueError(f"unknown listener events {sorted(unknown)}; use {LISTENER_EVENTS}")
        with self._lock:
            self._callbacks.append((callback, frozenset(events)))
        return callback

    def remove(self, callback: Listener) -> None:
        with self._lock:
            self._callbacks = [(cb, ev) for cb, ev in self._callbacks if cb is not callback]

    def wants(self, event: str) -> bool:
        return any(event in events for _, events in self._callbacks)

    def notify(self, record: RunRecord | Alert, event: str) -> None:
        for callback, events in list(self._callbacks):
            if event in events:
                try:
                    callback(record)
                except Exception:
                    logger.exception("mutexcron listener %r failed on %s record of job %r", callback, event,
                                     record.job_name)

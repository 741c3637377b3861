"""The task backend contract: where delayed tasks wait, and how workers receive them.

Each backend keeps a task's record (status, attempts, error) and hands due tasks to workers as
:class:`Delivery` objects, at least once: a delivery that is neither acked nor failed (its worker
died) comes back after the handler's visibility timeout. Backends never poll at a fixed interval:
a worker sleeps until the earliest due time and is woken early when a sooner task arrives.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import timedelta

from ..model import NewTask, TaskInfo, TaskStatus

__all__ = ["Delivery", "TaskBackend"]


class Delivery(ABC):
    """One due task handed to a worker; exactly one of ack / retry_later / fail must be called."""

    id: str
    task_type: str
    payload: str  # JSON text
    attempt: int  # 1 for the first try

    @abstractmethod
    def ack(self) -> None:
        """The handler succeeded: the task is done."""

    @abstractmethod
    def retry_later(self, delay: timedelta, error: str) -> None:
        """The handler failed and may be tried again after ``delay``."""

    @abstractmethod
    def fail(self, error: str) -> None:
        """The handler failed for the last time: keep the task as failed (retryable by hand)."""


class TaskBackend(ABC):
    """Where tasks wait. Every method raises :class:`~mutexcron.errors.StoreUnavailable` on connection errors."""

    @abstractmethod
    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        """Store ``tasks`` atomically per task (a batch may be split); each is due at its ``run_at``."""

    @abstractmethod
    def cancel(self, task_id: str) -> bool:
        """True if the task will now never start; False if it started, finished, or is unknown."""

    @abstractmethod
    def info(self, task_id: str) -> TaskInfo | None:
        """The task's record, or None if unknown."""

    def status(self, task_id: str) -> TaskStatus:
        found = self.info(task_id)
        return found.status if found is not None else TaskStatus.UNKNOWN

    @abstractmethod
    def retry(self, task_id: str) -> bool:
        """Schedule a failed task to run again now (attempts start over). False if it is not failed."""

    @abstractmethod
    def consume(
        self,
        task_types: Sequence[str],
        handle: Callable[[Delivery], None],
        stop: threading.Event,
        *,
        visibility_timeout: Callable[[str], timedelta],
        prefetch: int = 10,
    ) -> None:
        """Deliver due tasks of ``task_types`` to ``handle`` (in this thread) until ``stop`` is set.

        ``visibility_timeout(task_type)`` says how long a claimed task stays invisible to other workers.
        Returns soon (within a fraction of a second) after ``stop`` is set.
        """

    def wake(self) -> None:  # noqa: B027 - backends whose consume() can block for long override it
        """Make a consume() that is waiting (in this process) look again now: after ``stop`` was set."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""

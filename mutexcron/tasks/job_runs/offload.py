"""The scheduler side of ``run_on="tasks"``: the instance that won a tick's lock enqueues the body as one task.

The lock is kept (not released): the task carries the tick, its token and the schedule version it was fired on, and
the worker that runs it takes the lock over under a token of its own, heartbeats and releases it (:mod:`.worker`).
The task's id comes from the job name and the fire time, so an enqueue that is repeated (a retry after a lost
reply) finds the task already there. An enqueue that fails releases the lock with the outcome ``failed``.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ...errors import SchedulerConfigError, StoreUnavailable
from ...records import Outcome, RunRecord
from ...urls import shown
from ..queue import TaskQueue
from .task import TASK_TYPE, JobTask

if TYPE_CHECKING:
    from ...registry import Job, Registry

__all__ = ["ENQUEUE_ATTEMPTS", "Offload", "TasksOption"]

logger = logging.getLogger("mutexcron.scheduler")

TasksOption = str | TaskQueue | Callable[[], TaskQueue] | None
ENQUEUE_ATTEMPTS = 2  # an enqueue that failed on a connection error is tried once more (its id makes that safe)


class Offload:
    """Where a scheduler enqueues the bodies of its ``run_on="tasks"`` jobs: ``Scheduler(tasks=...)``, a task backend
    URL (a queue this scheduler builds and closes), a :class:`TaskQueue`, or a callable returning one (called at
    each enqueue: Django's per-process queue)."""

    def __init__(self, tasks: TasksOption) -> None:
        if tasks is not None and not isinstance(tasks, str | TaskQueue) and not callable(tasks):
            raise SchedulerConfigError(f"Scheduler tasks must be a task backend URL, a TaskQueue or None, "
                                       f"not {shown(tasks)}")
        if isinstance(tasks, str) and "://" not in tasks:
            raise SchedulerConfigError(f"Scheduler tasks must be a task backend URL (redis://, amqp://, django://), "
                                       f"not {shown(tasks)}")
        self._given = tasks
        self._built: TaskQueue | None = None
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return self._given is not None

    def check(self, registry: Registry) -> None:
        """SchedulerConfigError naming the ``run_on="tasks"`` jobs if there is no queue to enqueue them on."""
        offloaded = [job.name for job in registry if job.run_on == "tasks"]
        if offloaded and not self.configured:
            raise SchedulerConfigError(f"job(s) {', '.join(map(repr, offloaded))} run on tasks (run_on='tasks') but "
                                       "this scheduler has no task queue: pass Scheduler(tasks='redis://…' or a "
                                       "TaskQueue)")

    def queue(self) -> TaskQueue:
        given = self._given
        if given is None:
            raise SchedulerConfigError("this scheduler has no task queue for run_on='tasks' jobs: pass "
                                       "Scheduler(tasks=...)")
        if isinstance(given, TaskQueue):
            return given
        if isinstance(given, str):
            with self._lock:
                if self._built is None:
                    self._built = TaskQueue(given)
                return self._built
        return given()

    def close(self) -> None:
        """Close the queue this scheduler built from a URL (a new one is built at the next use)."""
        with self._lock:
            built, self._built = self._built, None
        if built is not None:
            built.close()

    def hand_over(self, job: Job, task: JobTask, started_at: datetime) -> tuple[RunRecord, bool]:
        """Enqueue ``task``, the body of ``job``'s tick with the lock its token holds: the ``enqueued`` record and True,
        or the ``failed`` record (the error in it) and False, after which the caller releases the lock."""
        error = None
        try:
            self._enqueue(job, task)
        except Exception:
            error = traceback.format_exc()
            logger.exception("job %r (fire %s): could not enqueue its task %s", job.name, task.fire_time.isoformat(),
                             task.task_id)
        outcome = Outcome.ENQUEUED if error is None else Outcome.FAILED
        if error is None:
            logger.info("job %r (fire %s) enqueued as task %s", job.name, task.fire_time.isoformat(), task.task_id)
        record = task.record(task.enqueued_by, outcome, started_at, finished_at=datetime.now(UTC), error=error)
        return record, error is None

    def _enqueue(self, job: Job, task: JobTask) -> None:
        queue = self.queue()
        for attempt in range(1, ENQUEUE_ATTEMPTS + 1):
            try:
                queue.schedule(TASK_TYPE, task.payload(), task_id=task.task_id)
                return
            except StoreUnavailable as error:
                if attempt == ENQUEUE_ATTEMPTS:
                    raise
                logger.warning("job %r: enqueueing task %s failed (%s); trying again", job.name, task.task_id, error)

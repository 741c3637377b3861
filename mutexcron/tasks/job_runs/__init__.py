"""The ``run_on="tasks"`` bridge: a job's tick won by a scheduler, its body run by a task worker.

The scheduler instance that wins a tick's lock keeps the lock and enqueues one task (:mod:`.offload`): its id from
the job name and the fire time (:func:`tick_task_id`), carrying the tick, the acquire's token (the tick token) and
the schedule version (:class:`JobTask`, :mod:`.task`). A worker with a :class:`JobRunner` (:mod:`.worker`)
registered on its queue takes the run over from the tick token under a new fencing token of its own, heartbeats it
while the body runs, then releases it with the outcome, which the alerts read. A worker that dies or stalls mid-body
keeps the run until its lease runs out: its task comes back after the visibility timeout, and the worker that gets
it takes the run over once that lease ran out, under a newer token. See docs/run-on-tasks.md.
"""

from .offload import ENQUEUE_ATTEMPTS, Offload, TasksOption
from .task import TASK_TYPE, JobTask, tick_task_id
from .worker import JobRunner, declared_or_stored

__all__ = ["ENQUEUE_ATTEMPTS", "TASK_TYPE", "JobRunner", "JobTask", "Offload", "TasksOption", "declared_or_stored",
           "tick_task_id"]

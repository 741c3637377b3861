"""The worker's side of ``run_on="tasks"`` in Django: ``manage.py mutexcron worker`` runs the jobs' bodies.

:func:`install` registers a :class:`~mutexcron.tasks.job_runs.JobRunner` on this process's task queue, with the
lock store from ``MUTEXCRON["STORE"]``, the jobs :func:`find_job` finds, and the scheduler's listeners: each body's
run lands in the run history (taking over its tick's ``enqueued`` row) and sends ``job_started`` /
``job_finished``, as a run in a web process does.
"""

from __future__ import annotations

from mutexcron import Job, default_registry
from mutexcron.tasks import TaskQueue
from mutexcron.tasks.job_runs import JobRunner

from . import runtime
from .conf import get_settings

__all__ = ["find_job", "install", "runs_jobs"]


def find_job(name: str) -> Job:
    """The job a task names: a declared ``@mutex_cron`` job (UnknownJobError otherwise)."""
    return default_registry.get(name)


def runs_jobs() -> bool:
    """Whether this project has jobs whose bodies run on workers (``run_on="tasks"``)."""
    return any(job.run_on == "tasks" for job in default_registry)


def install(queue: TaskQueue) -> JobRunner:
    """A JobRunner registered on ``queue`` (its worker then runs the jobs' task type); :meth:`JobRunner.close`
    it when the worker stops."""
    conf = get_settings()
    runner = JobRunner(conf.store_spec, lookup=find_job, instance_id=conf.instance_id or queue.worker_id,
                       metrics=conf.metrics, tracing=conf.tracing)
    runner.add_listener(runtime.send_signal, events=("started", "finished"))
    runner.add_listener(runtime.record_history)
    runner.register(queue, visibility_timeout=conf.tasks.job_visibility_timeout)
    return runner

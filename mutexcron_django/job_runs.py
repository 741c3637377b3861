"""The worker's side of ``run_on="tasks"`` in Django: ``manage.py mutexcron worker`` runs the jobs' bodies.

:func:`install` registers a :class:`~mutexcron.tasks.job_runs.JobRunner` on this process's task queue, with the
lock store from ``MUTEXCRON["STORE"]``, the jobs it finds there (the declared ones, and the run-time schedules the
store defines: :func:`~mutexcron.tasks.job_runs.declared_or_stored`), and the scheduler's listeners: each body's
run lands in the run history (taking over its tick's ``enqueued`` row) and sends ``job_started`` /
``job_finished``, as a run in a web process does.
"""

from __future__ import annotations

from mutexcron import default_registry
from mutexcron.tasks import TaskQueue
from mutexcron.tasks.job_runs import JobRunner

from . import runtime
from .conf import get_settings

__all__ = ["install", "runs_jobs"]


def runs_jobs() -> bool:
    """Whether this project may have jobs whose bodies run on workers: a declared ``run_on="tasks"`` job, or any
    target that run-time schedules may call (``@callable_target``: such a schedule may run on tasks). The store is
    not read (a worker reads it only when a task comes)."""
    return any(job.run_on == "tasks" for job in default_registry) or bool(default_registry.targets())


def install(queue: TaskQueue) -> JobRunner:
    """A JobRunner registered on ``queue`` (its worker then runs the jobs' task type); :meth:`JobRunner.close`
    it when the worker stops."""
    conf = get_settings()
    runner = JobRunner(conf.store_spec, instance_id=conf.instance_id or queue.worker_id, metrics=conf.metrics,
                       tracing=conf.tracing)
    runner.add_listener(runtime.send_signal, events=("started", "finished"))
    runner.add_listener(runtime.record_history)
    try:  # SchedulerConfigError for a job whose lease is shorter than JOB_VISIBILITY_TIMEOUT
        runner.register(queue, visibility_timeout=conf.tasks.job_visibility_timeout)
    except BaseException:
        runner.close()
        raise
    return runner

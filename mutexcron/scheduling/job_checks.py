"""What a scheduler checks of its declared jobs when it starts: that its store and its options can do what each job
asks (a task queue for ``run_on="tasks"``, the overlap state for ``buffer_one``/``replace``, the control plane for
``pause_on_failure``), each refusal a SchedulerConfigError naming the jobs; and an ERROR for each job that will not
run because its declaration failed (kept by :func:`mutexcron.declarations.collecting`), so the log says so."""

from __future__ import annotations

import logging

from ..definitions import check_overlap
from ..registry import Registry
from ..running.failures import check_pause_on_failure
from ..stores import LockStore
from ..tasks.job_runs import Offload

__all__ = ["check_jobs"]

logger = logging.getLogger("mutexcron.scheduler")


def check_jobs(store: LockStore, registry: Registry, offload: Offload) -> None:
    """SchedulerConfigError for the first declared job(s) ``store`` or ``offload`` cannot serve; an ERROR logged
    for each failed declaration."""
    for problem in registry.problems():
        logger.error("%s", problem)  # job 'name' (module.function (file:line)) will not run: the error
    offload.check(registry)  # the declared jobs (a run-time schedule's fires fail without it)
    check_overlap(store, registry)
    check_pause_on_failure(store, registry)

"""The fleet's health in one store read, for ``manage.py mutexcron health``, its ``health/`` view, ``check
--deploy`` and ``python -m mutexcron health``: healthy when the store answers and no declared job is overdue
or failing (:mod:`mutexcron.ops.alerts` decides both, as the running schedulers do)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from ..definitions import with_stored
from ..errors import CronSpecError, StoreUnavailable
from ..registry import Registry
from ..stores import LockStore, require_control
from .alerts import Problem, job_problems
from .control import effective_trigger

__all__ = ["DEFAULT_MISFIRE_GRACE_TIME", "HealthReport", "check_health"]

DEFAULT_MISFIRE_GRACE_TIME = timedelta(seconds=60)  # the Scheduler's default, which alert_after builds on


@dataclass(frozen=True)
class HealthReport:
    """Whether the store answered, and each declared job's problems."""

    store: str  # the store, as its repr shows it (passwords masked)
    checked_at: datetime
    store_error: str | None = None
    problems: list[Problem] = field(default_factory=list)
    jobs: int = 0  # how many declared jobs were judged

    @property
    def ok(self) -> bool:
        return self.store_error is None and not self.problems

    def lines(self) -> list[str]:
        """One line per problem (empty when healthy)."""
        lines = [f"store {self.store} cannot be reached: {self.store_error}"] if self.store_error else []
        return lines + [f"job {problem.job_name!r} is {problem.kind} since {problem.since.isoformat()}: "
                        f"{problem.detail}" for problem in self.problems]

    def as_json(self, *, detail: bool = True) -> dict[str, Any]:
        """The report for machines; without ``detail`` (anonymous callers) only the status."""
        status = "ok" if self.ok else "unhealthy"
        if not detail:
            return {"status": status}
        return {
            "status": status,
            "checked_at": self.checked_at.isoformat(),
            "store": {"description": self.store, "ok": self.store_error is None, "error": self.store_error},
            "jobs": self.jobs,
            "problems": [{"job": p.job_name, "kind": p.kind, "since": p.since.isoformat(), "detail": p.detail}
                         for p in self.problems],
        }


def check_health(store: LockStore, registry: Registry, *, default_zone: tzinfo = UTC,
                 misfire_grace_time: timedelta = DEFAULT_MISFIRE_GRACE_TIME,
                 now: datetime | None = None) -> HealthReport:
    """Judge every job of ``registry`` from one read of ``store`` (a lock document it does not have yet, or
    one from before ``created_at``, counts from ``now``: nothing is overdue before it was known). A store without
    the control plane keeps no outcomes to judge: ControlNotSupported."""
    controls = require_control(store, "judge the jobs' health (overdue and failing runs)")
    now = now or datetime.now(UTC)
    try:
        states = {state.name: state for state in controls.locks()}
    except StoreUnavailable as error:
        return HealthReport(repr(store), now, store_error=str(error), jobs=len(registry))
    problems: list[Problem] = []
    jobs = with_stored(registry, states)  # run-time schedules are judged as declared jobs are
    for job in jobs:
        state = states.get(job.name)
        try:
            trigger = effective_trigger(job, state, default_zone)
        except (CronSpecError, ValueError):  # an unusable override: the schedulers fire on the code's spec
            trigger = job.trigger(default_zone)
        problems += job_problems(job, state, trigger, now=now, misfire_grace_time=misfire_grace_time,
                                 known_since=now)
    return HealthReport(repr(store), now, problems=problems, jobs=len(jobs))

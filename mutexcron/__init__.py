"""mutexcron: cron jobs for apps that run many instances. Every instance fires, exactly one runs.

Declare jobs with :func:`mutex_cron`; run a :class:`Scheduler` on every instance against a shared lock
store (Redis, MongoDB, or the app's SQL database through ``mutexcron_django``).
"""

from .cron import CronSpec, next_fire_times, parse_cron
from .errors import (
    ControlNotSupported,
    CronSpecError,
    DuplicateJobError,
    JobCancelled,
    JobDefinitionError,
    LockBusy,
    MutexcronError,
    SchedulerConfigError,
    StoreConfigError,
    StoreUnavailable,
    UnknownJobError,
)
from .ops.alerts import Alert
from .records import JobContext, Outcome, RunRecord
from .registry import Job, Registry, callable_target, default_registry, mutex_cron
from .scheduling.scheduler import Scheduler

__version__ = "0.1.0"

__all__ = [
    "Alert",
    "ControlNotSupported",
    "CronSpec",
    "CronSpecError",
    "DuplicateJobError",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobDefinitionError",
    "LockBusy",
    "MutexcronError",
    "Outcome",
    "Registry",
    "RunRecord",
    "Scheduler",
    "SchedulerConfigError",
    "StoreConfigError",
    "StoreUnavailable",
    "UnknownJobError",
    "callable_target",
    "default_registry",
    "mutex_cron",
    "next_fire_times",
    "parse_cron",
]

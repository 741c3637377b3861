"""Exceptions raised by mutexcron; each message names the job, field or value at fault."""

from __future__ import annotations


class MutexcronError(Exception):
    """Base class for every error mutexcron raises on purpose."""


class CronSpecError(MutexcronError, ValueError):
    """A cron expression is invalid; raised when the job is declared, never at fire time."""


class JobDefinitionError(MutexcronError, ValueError):
    """A job's name, lease, timezone, busy policy or function signature is invalid."""


class SchedulerConfigError(MutexcronError, ValueError):
    """A Scheduler option (time zone, duration, worker count, registry...) is invalid; raised by the constructor."""


class DuplicateJobError(JobDefinitionError):
    """Two different functions were declared under the same job name."""


class UnknownJobError(MutexcronError, KeyError):
    """No job with that name is declared in the registry."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class LockBusy(MutexcronError):
    """The job's lock is held by another run and the busy policy is ``"raise"``."""

    def __init__(self, job_name: str, record: object | None = None) -> None:
        super().__init__(f"job {job_name!r} is locked by another run")
        self.job_name = job_name
        self.record = record


class JobCancelled(MutexcronError):
    """Raised by ``ctx.check_cancelled()`` inside a body told to stop (its timeout passed, or a newer tick
    replaces it); the run is recorded ``timed_out`` or ``replaced``, not ``failed``."""

    def __init__(self, job_name: str) -> None:
        super().__init__(f"job {job_name!r} was told to stop")
        self.job_name = job_name


class StoreConfigError(MutexcronError, ValueError):
    """A store URL or option is malformed; the message never contains a password."""


class ControlNotSupported(StoreConfigError):
    """A control-plane operation (pause, schedules, unlock, delete, listing, alerts, health) was asked of a lock
    store that implements only the lock contract (not :class:`mutexcron.stores.ControlStore`)."""

    def __init__(self, store: object, operation: str) -> None:
        super().__init__(f"the lock store {store!r} has no control plane, so it cannot {operation}: use a store "
                         "that implements mutexcron.stores.ControlStore (Redis, MongoDB, Django's SQL store, memory)")
        self.store, self.operation = store, operation


class StoreUnavailable(MutexcronError):
    """The lock store could not be reached or answered with an error."""


class ReplicationUnconfirmed(StoreUnavailable):
    """A lock was written, but fewer replicas than ``wait_replicas`` confirmed it in time: it does not count
    (the store released it), and the run is skipped as on any store error."""

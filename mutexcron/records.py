"""What a job body receives (:class:`JobContext`) and what every fire leaves behind (:class:`RunRecord`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from mutexcron.errors import JobCancelled

__all__ = ["JobContext", "Outcome", "RunRecord"]


class Outcome(StrEnum):
    """How one fire of a job ended on one instance."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED_BUSY = "skipped_busy"
    SKIPPED_ALREADY_RAN = "skipped_already_ran"
    SKIPPED_STORE_ERROR = "skipped_store_error"
    SKIPPED_PAUSED = "skipped_paused"  # an operator paused the job (not written to the Django history)
    SKIPPED_STALE_SCHEDULE = "skipped_stale_schedule"  # a tick of a schedule an operator just replaced
    ENQUEUED = "enqueued"  # won, and the body handed to a task worker (run_on="tasks"): the record has its task_id
    TIMED_OUT = "timed_out"  # the body ran past the job's timeout (told through ctx.cancelled)
    REPLACED = "replaced"  # the body was told to stop for a newer tick (on_busy="replace")
    SKIPPED_LATE = "skipped_late"  # the body would have started later than the job's start_deadline

    @property
    def ran(self) -> bool:
        """True if the body was run (whether it succeeded or not)."""
        return self in (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.TIMED_OUT, Outcome.REPLACED)


@dataclass(frozen=True)
class JobContext:
    """Passed to a job body that takes one argument: which fire this is and which lock it holds."""

    job_name: str
    fire_time: datetime  # aware UTC; the nominal scheduled time (the request time for run_now)
    instance_id: str
    token: int  # fencing token: grows with every acquisition of this job's lock
    catch_up: bool = False  # True for a missed tick run late (the job's catch_up option)
    _lost: list[bool] = field(default_factory=list, repr=False, compare=False)  # set by the heartbeat thread
    backfill: bool = False  # True for a tick run by Scheduler.backfill (an operator's range of past ticks)
    # Set when the body should stop: its timeout passed, or a newer tick replaces it (on_busy="replace").
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    # time.monotonic() before the lock was asked for (0.0: not known): its lease began no earlier.
    _asked: float = field(default=0.0, repr=False, compare=False)

    def check_cancelled(self) -> None:
        """Raise :class:`~mutexcron.JobCancelled` if the body has been told to stop; a long body calls this
        between steps."""
        if self.cancelled.is_set():
            raise JobCancelled(self.job_name)

    @property
    def lock_lost(self) -> bool:
        """True once a heartbeat found the lock taken away (the lease ran out and someone else took it)."""
        return bool(self._lost)

    def _mark_lost(self) -> None:
        self._lost.append(True)


@dataclass(frozen=True)
class RunRecord:
    """One instance's account of one fire of one job: ran (and how it ended) or skipped (and why).

    ``outcome`` is ``None`` only in the record given to "started" listeners while the body runs.
    """

    job_name: str
    fire_time: datetime
    instance_id: str
    outcome: Outcome | None
    started_at: datetime
    finished_at: datetime | None
    error: str | None = None  # the traceback of a failed body, or why a fire was skipped
    token: int | None = None
    lock_lost: bool = False
    manual: bool = False  # True for run_now()
    catch_up: bool = False  # True for a missed tick run late (the job's catch_up option)
    task_id: str | None = None  # the task that runs the body (run_on="tasks"): on the enqueued record and the run's
    backfill: bool = False  # True for a tick run by Scheduler.backfill (an operator's range of past ticks)

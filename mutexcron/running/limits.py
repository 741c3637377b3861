"""A job's run limits as a run applies them: ``timeout`` (how a body that ran past it is recorded) and
``start_deadline`` (a tick whose body would start too late is skipped). The heartbeat thread tells a body to stop
(:mod:`mutexcron.running.heartbeats`); the scheduler and the task worker record its run alike (docs/run-limits.md)."""

from __future__ import annotations

import logging
import traceback
from datetime import datetime

from ..errors import JobCancelled
from ..ops.control import jitter_delay
from ..records import Outcome
from ..registry import Job
from .heartbeats import Beat

__all__ = ["BodyEnd", "late_start"]


class BodyEnd:
    """How a body ended, for its run record: call :meth:`raised` from its ``except`` block, then read
    :meth:`verdict` once its heartbeat is removed (a beat whose deadline passed makes the run ``timed_out``)."""

    def __init__(self) -> None:
        self.exception: BaseException | None = None  # what the body raised
        self.error: str | None = None  # its traceback

    def raised(self, error: BaseException) -> None:
        self.exception, self.error = error, traceback.format_exc()

    def verdict(self, job: Job, beat: Beat | None, logger: logging.Logger, where: str) -> tuple[Outcome, str | None]:
        """``(outcome, error)``: ``timed_out`` if the body ran past its timeout (whatever it did then), else
        ``replaced`` if a newer tick asked it to stop, else ``failed`` with the traceback if it raised, else
        ``succeeded``; logged against ``where`` (the fire)."""
        if beat is not None and beat.timed_out:
            why = f"timed out: the body ran past its timeout ({job.timeout}) and was told to stop (ctx.cancelled)"
            if self.error is not None and not isinstance(self.exception, JobCancelled):
                why += f"; then it raised:\n{self.error}"
            logger.error("job %r (%s) %s", job.name, where, why.splitlines()[0])
            return Outcome.TIMED_OUT, why
        if beat is not None and beat.replaced:
            why = "replaced: a newer tick asked it to stop (on_busy='replace')"
            logger.warning("job %r (%s) %s", job.name, where, why)
            return Outcome.REPLACED, why
        if self.error is not None:
            logger.error("job %r (%s) failed", job.name, where, exc_info=self.exception)
            return Outcome.FAILED, self.error
        return Outcome.SUCCEEDED, None


def late_start(job: Job, fire_time: datetime, now: datetime) -> str | None:
    """Why a scheduled tick of ``job`` at ``fire_time`` must not start at ``now`` (its body would start later than
    its ``start_deadline`` after the tick's time plus its jitter), or None to run it."""
    if job.start_deadline is None:
        return None
    late = now - fire_time - jitter_delay(job.name, fire_time, job.jitter)
    if late <= job.start_deadline:
        return None
    return f"the body would start {late} after its tick, later than its start_deadline ({job.start_deadline})"

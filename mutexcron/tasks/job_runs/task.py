"""What the task of a ``run_on="tasks"`` tick is: its type, its id (from the job name and the fire time) and its
payload (the tick, the token of the acquire that won it, and the schedule version it was fired on). The scheduler
side (:mod:`.offload`) makes it, the worker side (:mod:`.worker`) reads it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...records import JobContext, Outcome, RunRecord
from ..model import JOB_TASK_TYPE, PayloadError

__all__ = ["PAYLOAD_VERSION", "TASK_TYPE", "JobTask", "tick_task_id"]

TASK_TYPE = JOB_TASK_TYPE
PAYLOAD_VERSION = 1


def tick_task_id(job_name: str, fire_time: datetime, *, manual: bool = False) -> str:
    """The id of the task that runs ``job_name``'s tick at ``fire_time``: the same on every instance and every
    try, so that a repeated enqueue of one tick finds its task. ``job-<name digest>-<fire time, epoch ms>``
    (``-m`` for a manual run, whose time is when it was asked for)."""
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:24]
    millis = round(fire_time.timestamp() * 1000)
    return f"job-{digest}-{millis}{'-m' if manual else ''}"


@dataclass(frozen=True)
class JobTask:
    """What a job's task carries: which tick of which job, the token of the acquire that won its lock (the worker
    takes the run over from it under a token of its own), and the schedule version it was fired on."""

    task_id: str
    job_name: str
    fire_time: datetime  # aware UTC, the tick's nominal time
    token: int  # the tick token: the acquire's, never the body's (ControlStore.take_over)
    catch_up: bool = False
    manual: bool = False
    enqueued_by: str = ""  # the scheduler instance that won the lock
    schedule_version: int | None = None  # None: unchecked (a payload from before versions; a declared job's manual run)

    def payload(self) -> dict[str, Any]:
        return {"v": PAYLOAD_VERSION, "task_id": self.task_id, "job": self.job_name,
                "fire_time": self.fire_time.astimezone(UTC).isoformat(), "token": self.token,
                "catch_up": self.catch_up, "manual": self.manual, "by": self.enqueued_by,
                "version": self.schedule_version}

    @classmethod
    def from_payload(cls, payload: object) -> JobTask:
        """The task a payload describes; PayloadError naming what is wrong with it."""
        if not isinstance(payload, dict) or payload.get("v") != PAYLOAD_VERSION:
            raise PayloadError(f"not a {TASK_TYPE} payload of version {PAYLOAD_VERSION}: {payload!r:.200}")
        try:
            fire_time = datetime.fromisoformat(payload["fire_time"])
            token, version = payload["token"], payload.get("version")
            task = cls(str(payload["task_id"]), str(payload["job"]), fire_time.astimezone(UTC), token,
                       bool(payload.get("catch_up")), bool(payload.get("manual")), str(payload.get("by", "")),
                       version)
        except (KeyError, TypeError, ValueError) as error:
            raise PayloadError(f"{TASK_TYPE} payload {payload!r:.200}: {error!r}") from None
        if any(isinstance(n, bool) or not isinstance(n, int) for n in (token, 0 if version is None else version)) \
                or fire_time.tzinfo is None:
            raise PayloadError(f"{TASK_TYPE} payload {payload!r:.200}: needs an integer token (and version) and an "
                               "aware fire_time")
        return task

    def context(self, instance_id: str, token: int, asked: float = 0.0) -> JobContext:
        """The body's context: the tick's fire time and catch-up flag, run by ``instance_id`` under ``token`` (the
        worker's own, from taking the run over, asked for at ``asked``: time.monotonic())."""
        return JobContext(self.job_name, self.fire_time, instance_id, token, catch_up=self.catch_up, _asked=asked)

    def record(self, instance_id: str, outcome: Outcome | None, started_at: datetime, **more: Any) -> RunRecord:
        """A run record of this tick by ``instance_id`` (``token``: the tick token unless given)."""
        return RunRecord(self.job_name, self.fire_time, instance_id, outcome, started_at, more.pop("finished_at", None),
                         token=more.pop("token", self.token), manual=self.manual, catch_up=self.catch_up,
                         task_id=self.task_id, **more)

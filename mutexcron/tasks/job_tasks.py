"""What the task of a ``run_on="tasks"`` tick is: its type, its id (from the job name and the fire time) and its
payload (the tick and the lock's fencing token). The scheduler side (:mod:`mutexcron.scheduling.offload`) makes
it, the worker side (:mod:`mutexcron.tasks.job_runs`) reads it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..records import JobContext, Outcome, RunRecord
from .model import PayloadError

__all__ = ["PAYLOAD_VERSION", "TASK_TYPE", "JobTask", "tick_task_id"]

TASK_TYPE = "mutexcron-job"  # not "mutexcron.…": the RabbitMQ backend keeps those names for its own queues
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
    """What a job's task carries: which tick of which job, and the lock it holds (its fencing token)."""

    task_id: str
    job_name: str
    fire_time: datetime  # aware UTC, the tick's nominal time
    token: int
    catch_up: bool = False
    manual: bool = False
    enqueued_by: str = ""  # the scheduler instance that won the lock

    def payload(self) -> dict[str, Any]:
        return {"v": PAYLOAD_VERSION, "task_id": self.task_id, "job": self.job_name,
                "fire_time": self.fire_time.astimezone(UTC).isoformat(), "token": self.token,
                "catch_up": self.catch_up, "manual": self.manual, "by": self.enqueued_by}

    @classmethod
    def from_payload(cls, payload: object) -> JobTask:
        """The task a payload describes; PayloadError naming what is wrong with it."""
        if not isinstance(payload, dict) or payload.get("v") != PAYLOAD_VERSION:
            raise PayloadError(f"not a {TASK_TYPE} payload of version {PAYLOAD_VERSION}: {payload!r:.200}")
        try:
            fire_time = datetime.fromisoformat(payload["fire_time"])
            token = payload["token"]
            task = cls(str(payload["task_id"]), str(payload["job"]), fire_time.astimezone(UTC), token,
                       bool(payload.get("catch_up")), bool(payload.get("manual")), str(payload.get("by", "")))
        except (KeyError, TypeError, ValueError) as error:
            raise PayloadError(f"{TASK_TYPE} payload {payload!r:.200}: {error!r}") from None
        if isinstance(token, bool) or not isinstance(token, int) or fire_time.tzinfo is None:
            raise PayloadError(f"{TASK_TYPE} payload {payload!r:.200}: needs an integer token and an aware fire_time")
        return task

    def context(self, instance_id: str) -> JobContext:
        """The body's context: the tick's fire time, catch-up flag and token, run by ``instance_id``."""
        return JobContext(self.job_name, self.fire_time, instance_id, self.token, catch_up=self.catch_up)

    def record(self, instance_id: str, outcome: Outcome | None, started_at: datetime, **more: Any) -> RunRecord:
        return RunRecord(self.job_name, self.fire_time, instance_id, outcome, started_at, more.pop("finished_at", None),
                         token=self.token, manual=self.manual, catch_up=self.catch_up, task_id=self.task_id, **more)

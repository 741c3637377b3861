"""Synthetic nemesis histories for the checker's and the report's specifications: events appended at given seconds
after the run start, shaped as the harness, the schedulers, the workers and the operator record them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.nemesis.checker import Verdict, check
from tests.nemesis.history import Event, JobSpec, RunConfig

T0 = datetime(2030, 1, 1, tzinfo=UTC)  # the harness's wall clock at the run start
MONO0 = 5000.0  # time.monotonic() at the run start

JOB = JobSpec("job", "*/10 * * * * *", lease=3.0)
PROBE = JobSpec("probe", "* * * * * *", lease=2.0, probe=True)
WORKER_JOB = JobSpec("worker_job", "*/10 * * * * *", lease=3.0, run_on="tasks")


def iso(at: float) -> str:
    return (T0 + timedelta(seconds=at)).isoformat()


class History:
    """A synthetic history: events appended at given seconds after the run start (mono and harness wall alike)."""

    def __init__(self, *jobs: JobSpec, broken: str | None = None) -> None:
        self.config = RunConfig(store="redis", seed=7, minutes=1.0, jobs=list(jobs), broken=broken)
        self.events: list[Event] = []
        self.tokens = 0
        self.add(0.0, "harness", "run", phase="start", config=self.config.to_json())

    def add(self, at: float, proc: str, event: str, **fields: Any) -> Event:
        line = {"event": event, "proc": proc, "mono": MONO0 + at, "wall": iso(at), **fields}
        self.events.append(line)
        return line

    def body(self, at: float, proc: str, job: JobSpec | str, fire: float, *, seconds: float | None = 0.5,
             lock_lost: bool = False, **fields: Any) -> Event:
        """A body of ``job`` for the tick at ``fire`` s, started at ``at``, ending ``seconds`` later (None: never)."""
        spec = job if isinstance(job, JobSpec) else JobSpec(job, "* * * * * *", lease=3.0)
        self.tokens += 1
        common = {"job": spec.name, "fire_time": iso(fire), "token": self.tokens, "lease": spec.lease,
                  "run_on": spec.run_on, "catch_up": False, "backfill": False, "defn": None, **fields}
        start = self.add(at, proc, "body", phase="start", **common)
        if seconds is not None:
            self.add(at + seconds, proc, "body", phase="end", lock_lost=lock_lost, cancelled=False, failed=False,
                     **common)
        return start

    def probe_ticks(self, first: int, last: int, proc: str = "s1") -> None:
        """The probe job's ticks from ``first`` to ``last`` s, each run once, 50 ms after its fire time."""
        for fire in range(first, last + 1):
            self.body(fire + 0.05, proc, PROBE, fire, seconds=0.1)

    def fault(self, start: float, end: float | None, kind: str, target: str = "store", fault: int = 1,
              amount: float = 0.0) -> None:
        self.add(start, "harness", "fault", phase="start", kind=kind, target=target, fault=fault, detail=None,
                 amount=amount)
        if end is not None:
            self.add(end, "harness", "fault", phase="end", kind=kind, target=target, fault=fault, detail=None)

    def op(self, called: float, action: str, target: str, *, argument: Any = None, error: str | None = None,
           defn: str | None = None) -> None:
        self.add(called + 0.1, "op", "op", action=action, target=target, argument=argument, result=None,
                 error=error, called=MONO0 + called, returned=MONO0 + called + 0.1, defn=defn)

    def task(self, task_id: str, *, due: float, starts: tuple[float, ...] = (), cancel: float | None = None) -> None:
        self.add(due - 5.0, "p1", "scheduled", task_id=task_id, due=iso(due), called=MONO0 + due - 5.0,
                 returned=MONO0 + due - 4.9)
        if cancel is not None:
            self.add(cancel + 0.05, "p1", "cancel", task_id=task_id, cancelled=True, called=MONO0 + cancel,
                     returned=MONO0 + cancel + 0.05)
        for number, at in enumerate(starts, 1):
            self.add(at, f"w{number}", "task", phase="start", task_id=task_id, attempt=number)

    def check(self, end: float = 60.0) -> Verdict:
        self.add(end, "harness", "run", phase="end", config=self.config.to_json())
        return check(self.events, self.config)


def props(verdict: Verdict) -> set[str]:
    return {anomaly.prop for anomaly in verdict.anomalies}


def record(history: History, at: float, proc: str, fire: float, outcome: str, token: int | None = None) -> None:
    history.add(at, proc, "record", job=PROBE.name, fire_time=iso(fire), outcome=outcome, token=token, manual=False,
                backfill=False)

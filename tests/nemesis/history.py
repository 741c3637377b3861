"""The history of a nemesis run: what every process recorded, one JSON line per event in a ledger of its own
(tests.support.Ledger: O_APPEND, one write() per line, fsync'ed, so a SIGKILL loses no line already written).

Every line carries:

- ``event`` and ``proc`` (the process's name: ``s1``..``s6`` schedulers, ``w1``..``w3`` task workers, ``p1``
  producer, ``op`` operator, ``harness``);
- ``mono``: ``time.monotonic()`` when it was written. CLOCK_MONOTONIC is one clock for every process of the
  machine and no fault moves it, so it orders the whole history in real time;
- ``wall``: the process's own wall clock (ISO, UTC), which a clock-jump fault moves by up to ±2 s.

The events (fields besides the above):

``ready``    pid, role                          the process started its scheduler, worker or loop
``body``     phase ("start" | "end"), job, fire_time (ISO: the tick), token, lease (seconds), run_on ("here" |
             "tasks"), catch_up, backfill, manual (run_now), defn (the run-time schedule definition it ran, or
             None); at "end" also lock_lost, cancelled, failed
``record``   job, fire_time, outcome (mutexcron.Outcome), token, manual, catch_up, backfill, task_id, lock_lost
``task``     phase ("start" | "end"), task_id                a delayed task's handler ran (workers)
``scheduled``  task_id, due (ISO), called, returned (mono), error   a producer scheduled a delayed task (a call
             that raised has ``error`` and no ``due``: the task may or may not be stored, and is not judged)
``cancel``   task_id, cancelled (bool: cancel() returned True), called, returned (mono)
``op``       action, target, argument, result, error, called, returned (mono)   an operator call, after it returned
             (actions: pause, resume, set_schedule, reset_schedule, add_schedule, change_schedule,
             remove_schedule, backfill, run_now; ``defn`` for the schedule actions: the definition label)
``fault``    phase ("start" | "end"), kind, target, fault (its id); at "start" duration (seconds) and amount (a
             clock jump's seconds, a slow link's added latency); at "end" error if it could not be done. The
             target is a process, "store" (the store's servers: every process) or "proxied" (the link of the
             processes behind the harness's proxy, RunConfig.proxied). Written by the harness
``spawn`` / ``exit``   target (a process name), pid; exit: how (signal name or exit code)     by the harness
``run``      phase ("start" | "end"), config (see :class:`RunConfig`)                          by the harness

A body or task whose process was SIGKILLed has a "start" and no "end".
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

Event = dict[str, Any]


@dataclass(frozen=True)
class JobSpec:
    """One job of the workload, as the checker needs to know it."""

    name: str
    spec: str  # cron, with seconds
    lease: float  # seconds
    on_busy: str = "skip"
    run_on: str = "here"
    body_seconds: float = 0.0
    timeout: float | None = None
    catch_up: str = "skip"
    probe: bool = False  # quick and never touched by an operator: each tick with no fault near it runs exactly once
    operated: bool = False  # paused, re-timed, backfilled and run by hand by the operator


@dataclass
class RunConfig:
    """What a run was asked to do; written in the harness's "run" line, read back by the checker."""

    store: str
    seed: int
    minutes: float
    jobs: list[JobSpec] = field(default_factory=list)
    sync_interval: float = 2.0
    visibility_timeout: float = 4.0
    runtime_target: str = "nemesis.runtime"  # the function run-time schedules call
    broken: str | None = None  # a deliberately broken variant (tests.nemesis.broken), or None
    proxied: list[str] = field(default_factory=list)  # the processes that reach the store through the proxy
    schedulers: list[str] = field(default_factory=lambda: [f"s{n}" for n in range(1, 7)])  # their process names

    def job(self, name: str) -> JobSpec | None:
        return next((job for job in self.jobs if job.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConfig:
        jobs = [JobSpec(**job) for job in data.get("jobs", [])]
        return cls(**{**data, "jobs": jobs})


class HistoryWriter:
    """One process's ledger of the run (see the module docstring)."""

    def __init__(self, path: Path, proc: str) -> None:
        self.proc = proc
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        entry = {"event": event, "proc": self.proc, "mono": time.monotonic(),
                 "wall": datetime.now(UTC).isoformat(), **fields}
        line = (json.dumps(entry, default=str) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)
            os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_history(directory: Path) -> list[Event]:
    """Every complete line of every ``*.jsonl`` ledger in ``directory``, in real-time order (``mono``)."""
    events: list[Event] = []
    for path in sorted(directory.glob("*.jsonl")):
        text = path.read_text(errors="replace")
        events.extend(json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n"))
    events.sort(key=lambda event: event["mono"])
    return events


def run_config(events: Iterable[Event]) -> RunConfig:
    """The configuration from the harness's "run" start line."""
    for event in events:
        if event["event"] == "run" and event.get("phase") == "start":
            return RunConfig.from_json(event["config"])
    raise ValueError("the history has no run start line")

"""One process of the nemesis fleet, started by the harness (tests/nemesis/run.py):

    python -m tests.nemesis.workload ROLE --proc NAME --dir RUN_DIR

ROLE is ``scheduler`` (a Scheduler running every job of the workload), ``worker`` (a task worker: the bodies of the
``run_on="tasks"`` job and the producer's delayed tasks), ``producer`` (schedules delayed tasks and cancels some),
``operator`` (pauses, re-times, backfills and runs the operated job by hand; adds, redefines and removes run-time
schedules) or ``migrate`` (applies the Django migrations of the run's database, then exits). RUN_DIR holds
``config.json`` (written by the harness; ``config-proxied.json`` for the processes behind its proxy) and each
process's ledger, ``NAME.jsonl`` (tests.nemesis.history).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mutexcron import Registry, Scheduler, mutex_cron
from mutexcron.records import JobContext, RunRecord
from mutexcron.stores import require_control
from mutexcron.tasks import HandlerRegistry, TaskQueue, task_handler
from mutexcron.tasks.job_runs import JobRunner
from tests.nemesis import broken
from tests.nemesis.history import HistoryWriter, JobSpec, RunConfig

TASK_TYPE = "nemesis.task"
RUNTIME_LEASE = 3.0  # seconds: the lease of every run-time schedule the operator adds
WORK_STEP = 0.05


def work(seconds: float, cancelled: threading.Event) -> bool:
    """``seconds`` of the body's own time in steps (a SIGSTOP does not count as work); True if told to stop."""
    remaining = seconds
    while remaining > 0:
        if cancelled.wait(min(remaining, WORK_STEP)):
            return True
        remaining -= WORK_STEP
    return False


class Fleet:
    """What every role shares: the run's configuration, the ledger, and the jobs declared in a registry."""

    def __init__(self, directory: Path, proc: str, config: str) -> None:
        settings = json.loads((directory / config).read_text())
        self.config = RunConfig.from_json(settings["run"])
        self.store_url: str = settings["store_url"]
        self.tasks_url: str = settings["tasks_url"]
        self.cancel_store: str | None = settings.get("cancel_store")
        self.django: str | None = settings.get("django")
        self.proc = proc
        self.history = HistoryWriter(directory / f"{proc}.jsonl", proc)
        self.registry = Registry()
        self.stop = threading.Event()
        self.manual = False  # the operator's run_now is under way (its body runs in the operator's thread)
        self.backfill: str | None = None  # the operator's backfill under way: "START END SCHEDULE"
        for job in self.config.jobs:
            mutex_cron(job.spec, name=job.name, registry=self.registry, lease=job.lease, on_busy=job.on_busy,  # type: ignore[arg-type]
                       run_on=job.run_on, timeout=job.timeout, catch_up=job.catch_up)(self.body(job))  # type: ignore[arg-type]
        self.registry.allow(self.runtime_body, self.config.runtime_target)

    def fire_context(self) -> Callable[[], AbstractContextManager[Any]] | None:
        """Django set up for a ``django://`` store (once); the fire context that gives each fire fresh connections."""
        if self.django is None:
            return None
        os.environ["DJANGO_SETTINGS_MODULE"] = self.django
        import django

        django.setup()
        from mutexcron_django.per_process import fresh_connections

        return fresh_connections

    def body(self, job: JobSpec) -> Callable[[JobContext], None]:
        def run(ctx: JobContext) -> None:
            self.run_body(ctx, job.lease, job.run_on, job.body_seconds, None)

        return run

    def runtime_body(self, ctx: JobContext, defn: str, lease: float = RUNTIME_LEASE) -> None:
        self.run_body(ctx, lease, "here", 0.01, defn)

    def run_body(self, ctx: JobContext, lease: float, run_on: str, seconds: float, defn: str | None) -> None:
        fields = {"job": ctx.job_name, "fire_time": ctx.fire_time.isoformat(), "token": ctx.token, "lease": lease,
                  "run_on": run_on, "catch_up": ctx.catch_up, "backfill": ctx.backfill, "manual": self.manual,
                  "range": self.backfill if ctx.backfill else None, "defn": defn}
        self.history.write("body", phase="start", **fields)
        cancelled = work(seconds, ctx.cancelled)
        self.history.write("body", phase="end", lock_lost=ctx.lock_lost, cancelled=cancelled, failed=False, **fields)

    def on_record(self, record: RunRecord) -> None:
        self.history.write("record", job=record.job_name, fire_time=record.fire_time.isoformat(),
                           outcome=str(record.outcome), token=record.token, manual=record.manual,
                           catch_up=record.catch_up, backfill=record.backfill, task_id=record.task_id,
                           lock_lost=record.lock_lost, error=(record.error or "")[-300:] or None)

    def queue(self, handlers: HandlerRegistry | None = None) -> TaskQueue:
        return TaskQueue(self.tasks_url, cancel_store=self.cancel_store, handlers=handlers or HandlerRegistry(),
                         worker_id=self.proc)

    def scheduler(self, fire_context: Callable[[], AbstractContextManager[Any]] | None) -> Scheduler:
        return Scheduler(self.store_url, registry=self.registry, instance_id=self.proc, tasks=self.queue(),
                         sync_interval=timedelta(seconds=self.config.sync_interval), fire_context=fire_context)


def run_scheduler(fleet: Fleet) -> None:
    scheduler = fleet.scheduler(fleet.fire_context())
    scheduler.add_listener(fleet.on_record)
    scheduler.start()
    fleet.history.write("ready", pid=os.getpid(), role="scheduler")
    while not fleet.stop.wait(0.5):
        pass
    scheduler.shutdown(timeout=timedelta(seconds=5))


def run_worker(fleet: Fleet) -> None:
    fleet.fire_context()
    handlers = HandlerRegistry()

    @task_handler(TASK_TYPE, registry=handlers, visibility_timeout=timedelta(seconds=fleet.config.visibility_timeout))
    def handle(payload: dict[str, Any]) -> None:
        fleet.history.write("task", phase="start", task_id=payload["id"])
        time.sleep(0.02)  # the task's own work
        fleet.history.write("task", phase="end", task_id=payload["id"])

    queue = fleet.queue(handlers)
    runner = JobRunner(fleet.store_url, registry=fleet.registry, instance_id=fleet.proc)
    runner.add_listener(fleet.on_record)
    runner.register(queue, visibility_timeout=timedelta(seconds=fleet.config.visibility_timeout))
    queue.start()
    fleet.history.write("ready", pid=os.getpid(), role="worker")
    while not fleet.stop.wait(0.5):
        if queue.worker_error is not None:
            raise queue.worker_error
    queue.close()
    runner.close()


def run_producer(fleet: Fleet, rng: random.Random) -> None:
    fleet.fire_context()
    handlers = HandlerRegistry()
    task_handler(TASK_TYPE, registry=handlers)(lambda payload: None)
    queue = fleet.queue(handlers)
    fleet.history.write("ready", pid=os.getpid(), role="producer")
    cancels: list[tuple[float, str]] = []  # (when, task id)
    while not fleet.stop.wait(rng.uniform(0.1, 0.3)):
        task_id = uuid.uuid4().hex
        delay = rng.uniform(0, 3)
        called = time.monotonic()
        try:
            queue.schedule(TASK_TYPE, {"id": task_id}, delay=timedelta(seconds=delay), task_id=task_id)
        except Exception as failed:  # a store fault: the task may or may not be stored; it is not counted
            fleet.history.write("scheduled", task_id=task_id, error=repr(failed)[:200], called=called,
                                returned=time.monotonic())
            continue
        fleet.history.write("scheduled", task_id=task_id, due=(datetime.now(UTC) + timedelta(seconds=delay))
                            .isoformat(), called=called, returned=time.monotonic(), error=None)
        if rng.random() < 0.25:
            cancels.append((time.monotonic() + rng.uniform(0, 3), task_id))
        for when, cancelled_id in [entry for entry in cancels if entry[0] <= time.monotonic()]:
            cancels.remove((when, cancelled_id))
            called = time.monotonic()
            try:
                done, error = queue.cancel(cancelled_id), None
            except Exception as raised:
                done, error = False, repr(raised)[:200]
            fleet.history.write("cancel", task_id=cancelled_id, cancelled=done, error=error, called=called,
                                returned=time.monotonic())
    queue.close()


def operator_actions(fleet: Fleet, scheduler: Scheduler, rng: random.Random) -> Iterator[tuple[str, str, str,
                                                                                               Callable[[], Any]]]:
    """Endless (action, target, argument, call) of the operator, chosen at random with ``rng``."""
    operated = [job.name for job in fleet.config.jobs if job.operated]
    specs = ["* * * * * *", "*/2 * * * * *", "*/3 * * * * *"]
    paused: set[str] = set()
    retimed: dict[str, str] = {}  # job -> the schedule this operator set (it alone re-times the operated jobs)
    schedules: dict[str, int] = {}  # run-time schedule -> its definitions so far
    ranges: list[tuple[datetime, datetime]] = []  # the backfills so far
    while True:
        job = rng.choice(operated)
        roll = rng.random()
        if job in paused:
            paused.discard(job)
            yield "resume", job, "", lambda job=job: scheduler.resume(job)  # type: ignore[misc]
        elif roll < 0.15:
            paused.add(job)
            yield "pause", job, "", lambda job=job: scheduler.pause(job, by="nemesis")  # type: ignore[misc]
        elif roll < 0.3:
            if job in retimed:
                del retimed[job]
                yield "reset_schedule", job, "", lambda job=job: scheduler.reset_schedule(job, by="nemesis")  # type: ignore[misc]
            else:
                spec = retimed[job] = rng.choice(specs[1:])
                yield "set_schedule", job, spec, lambda job=job, spec=spec: scheduler.set_schedule(  # type: ignore[misc]
                    job, spec, by="nemesis")
        elif roll < 0.4:  # a new range of past ticks, or one run before again (it runs only what it has not run)
            if ranges and rng.random() < 0.4:
                start, end = rng.choice(ranges)
            else:
                end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=rng.randint(3, 30))
                start = end - timedelta(seconds=rng.randint(2, 8))
                ranges.append((start, end))
            yield "backfill", job, "", lambda job=job, start=start, end=end: backfill(  # type: ignore[misc]
                fleet, scheduler, job, start, end)
        elif roll < 0.5:
            yield "run_now", job, "", lambda job=job: scheduler.run_now(job, on_busy="skip")  # type: ignore[misc]
        else:
            name = f"rt.{rng.randrange(4)}"
            if name in schedules and rng.random() < 0.35:
                del schedules[name]
                yield "remove_schedule", name, "", lambda name=name: scheduler.remove_schedule(name, by="nemesis")  # type: ignore[misc]
                continue
            action = "change_schedule" if name in schedules else "add_schedule"
            schedules[name] = schedules.get(name, 0) + 1
            defn, spec = f"{name}@{fleet.proc}.{schedules[name]}.{uuid.uuid4().hex[:6]}", rng.choice(specs)
            yield action, name, f"{spec} {defn}", lambda name=name, spec=spec, defn=defn: scheduler.add_schedule(  # type: ignore[misc]
                name, spec, fleet.config.runtime_target, kwargs={"defn": defn, "lease": RUNTIME_LEASE},
                lease=RUNTIME_LEASE, by="nemesis")


def backfill(fleet: Fleet, scheduler: Scheduler, job: str, start: datetime, end: datetime) -> int:
    """Backfill, the bodies labelled with the range: its bounds and the schedule in force (docs/backfill.md: a
    backfill is its range's first and last ticks), read from the store first. This operator alone re-times the job,
    but a change whose reply it lost may or may not have landed."""
    state = require_control(scheduler.store, "read the schedule in force").lock(job)
    fleet.backfill = f"{start.isoformat()} {end.isoformat()} {(state and state.schedule) or 'declared'}"
    return scheduler.backfill(job, start, end, by="nemesis")


def run_operator(fleet: Fleet, rng: random.Random) -> None:
    scheduler = fleet.scheduler(fleet.fire_context())  # never started: it acts on the store
    scheduler.add_listener(fleet.on_record)  # its manual runs and backfills
    fleet.history.write("ready", pid=os.getpid(), role="operator")
    actions = operator_actions(fleet, scheduler, rng)
    while not fleet.stop.wait(rng.uniform(1.0, 3.0)):
        action, target, argument, call = next(actions)
        called = time.monotonic()
        fleet.manual = action == "run_now"
        try:
            result, error = call(), None
        except Exception as raised:
            result, error = None, f"{type(raised).__name__}: {raised}"[:300]
        argument = fleet.backfill or argument if action == "backfill" else argument
        fleet.manual, fleet.backfill = False, None
        defn = argument.split()[-1] if action in ("add_schedule", "change_schedule") else None
        fleet.history.write("op", action=action, target=target, argument=argument, defn=defn,
                            result=result if isinstance(result, int | type(None)) else str(result)[:200],
                            error=error, called=called, returned=time.monotonic())
    scheduler.shutdown()


def run_migrate(fleet: Fleet) -> None:
    fleet.fire_context()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=("scheduler", "worker", "producer", "operator", "migrate"))
    parser.add_argument("--proc", required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--config", default="config.json", help="in --dir: the run's settings for this process")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {args.proc} %(threadName)s %(name)s %(levelname)s %(message)s")
    fleet = Fleet(args.dir, args.proc, args.config)
    fleet.fire_context()  # Django first, if any: a broken variant patches its store too
    broken.apply(fleet.config.broken)
    signal.signal(signal.SIGTERM, lambda *_: fleet.stop.set())
    rng = random.Random(f"{fleet.config.seed}:{args.proc}")
    roles: dict[str, Callable[[], None]] = {
        "scheduler": lambda: run_scheduler(fleet), "worker": lambda: run_worker(fleet),
        "producer": lambda: run_producer(fleet, rng), "operator": lambda: run_operator(fleet, rng),
        "migrate": lambda: run_migrate(fleet),
    }
    roles[args.role]()
    fleet.history.write("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

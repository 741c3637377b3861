"""One process of a ``run_on="tasks"`` fleet, run by tests/tasks/test_run_on_fleet.py.

    python tests/tasks/run_on_process.py --role scheduler|worker --name NAME --ledger PATH
        --store LOCK_STORE_URL --tasks TASK_BACKEND_URL [--visibility-timeout SECONDS] [--lease SECONDS]

Declares one job, "offloaded.tick", every second with ``run_on="tasks"``, in a registry of its own. A
``scheduler`` runs a Scheduler with ``tasks=``; a ``worker`` runs a TaskQueue worker with a JobRunner on the same
registry. Each appends one JSON line per event to its own ledger (tests.support.Ledger):

    {"event": "ready"}                                after start
    {"event": "record", "outcome": ..., "task_id": ...}     each RunRecord (scheduler: enqueued or skipped;
                                                      worker: the body's run)
    {"event": "started", "fire_time": ..., "token": ...}    the body began (worker)
    {"event": "holding", ...}                         the body took the hold marker (tests.support.held_body):
                                                      it blocks until the process is killed
    {"event": "body", "fire_time": ..., "token": ...} the body completed
    {"event": "stopped"}                              after a clean stop on SIGTERM
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mutexcron.records import JobContext, RunRecord
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.tasks import HandlerRegistry, TaskQueue
from mutexcron.tasks.job_runs import JobRunner
from tests.support import Ledger
from tests.support.held_body import run_held_body

JOB_NAME = "offloaded.tick"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=("scheduler", "worker"), required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--visibility-timeout", type=float, default=2.0)
    parser.add_argument("--lease", type=float, default=10.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    ledger = Ledger(args.ledger, lambda: datetime.now(UTC).isoformat(), name=args.name)
    registry = Registry()

    @mutex_cron("* * * * * *", name=JOB_NAME, registry=registry, run_on="tasks", lease=args.lease)
    def tick(ctx: JobContext) -> None:
        run_held_body(ctx, args.ledger.parent, ledger.write)

    def on_record(record: RunRecord) -> None:
        ledger.write("record", outcome=str(record.outcome), fire_time=record.fire_time.isoformat(),
                     task_id=record.task_id, token=record.token, error=record.error)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.role == "scheduler":
        scheduler = Scheduler(args.store, registry=registry, instance_id=args.name, tasks=args.tasks)
        scheduler.add_listener(on_record)
        scheduler.start()
        ledger.write("ready")
        stop.wait()
        scheduler.shutdown()
    else:
        queue = TaskQueue(args.tasks, handlers=HandlerRegistry(), worker_id=args.name)
        runner = JobRunner(args.store, lookup=registry.get, instance_id=args.name)
        runner.add_listener(on_record)
        runner.register(queue, visibility_timeout=timedelta(seconds=args.visibility_timeout))
        queue.start()
        ledger.write("ready")
        stop.wait()
        queue.close()
        runner.close()
    ledger.write("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One instance of a fleet, run as its own OS process by tests/test_fleet.py.

    python tests/fleet_instance.py --store URL --instance NAME --ledger PATH
        [--spec "* * * * * *"] [--lease SECONDS] [--clock-skew SECONDS] [--body-seconds SECONDS] [--hang-first]

Declares one job, "fleet.tick", in a registry of its own, runs a Scheduler on it and appends one JSON line
per event to its own ledger file (opened with O_APPEND; each line is written with a single write() and
fsync'ed, so a ledger never loses, splits or merges lines, and no two processes share a file):

    {"event": "ready", ...}                  after Scheduler.start()
    {"event": "record", "outcome": ...}      one per RunRecord of a run or a skip (listener)
    {"event": "body", "fire_time": ...}      written by the job body before it returns
    {"event": "holding", "fire_time": ...}   --hang-first: the first body of the fleet, which never returns
    {"event": "stopped", ...}                after a clean shutdown on SIGTERM

Every line carries "instance" and "at" (this process's wall clock when the line was written, ISO UTC).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mutexcron.records import JobContext, RunRecord
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduler import Scheduler
from tests.support import Ledger

JOB_NAME = "fleet.tick"
HANG_MARKER = "hang-first.marker"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True, help="lock store URL")
    parser.add_argument("--instance", required=True, help="this instance's id")
    parser.add_argument("--ledger", required=True, type=Path, help="this instance's own JSON-lines ledger")
    parser.add_argument("--spec", default="* * * * * *", help="cron spec of the job (default: every second)")
    parser.add_argument("--lease", type=float, default=10.0, help="lease in seconds (default 10)")
    parser.add_argument("--clock-skew", type=float, default=0.0, help="seconds; -2 fires every tick 2 s late")
    parser.add_argument("--body-seconds", type=float, default=0.001, help="how long the body runs (default 1 ms)")
    parser.add_argument("--hang-first", action="store_true",
                        help="the first body run in the fleet blocks forever (marker file next to the ledger)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s {args.instance} %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    ledger = Ledger(args.ledger, lambda: datetime.now(UTC).isoformat(), instance=args.instance)
    marker = args.ledger.parent / HANG_MARKER
    never = threading.Event()
    hanging = threading.Event()

    def first_body_in_fleet() -> bool:
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return False
        return True

    registry = Registry()

    @mutex_cron(args.spec, name=JOB_NAME, lease=args.lease, registry=registry)
    def tick(ctx: JobContext) -> None:
        fields = {"fire_time": ctx.fire_time.isoformat(), "token": ctx.token}
        if args.hang_first and first_body_in_fleet():
            ledger.write("holding", **fields)
            hanging.set()
            never.wait()  # holds the lock until this process is killed; the heartbeat keeps renewing it
        time.sleep(args.body_seconds)
        ledger.write("body", **fields)

    def on_record(record: RunRecord) -> None:
        ledger.write(
            "record",
            job=record.job_name,
            fire_time=_iso(record.fire_time),
            outcome=str(record.outcome),
            started_at=_iso(record.started_at),
            finished_at=_iso(record.finished_at),
            token=record.token,
            lock_lost=record.lock_lost,
            error=record.error,
        )

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())

    scheduler = Scheduler(
        args.store, registry=registry, instance_id=args.instance, clock_skew=timedelta(seconds=args.clock_skew)
    )
    scheduler.add_listener(on_record)
    scheduler.start()
    ledger.write("ready", pid=os.getpid(), clock_skew=args.clock_skew, lease=args.lease)
    while not stop.wait(0.5):  # a bounded wait keeps the main thread responsive to signals
        pass
    scheduler.shutdown(wait=True, timeout=timedelta(seconds=5))
    ledger.write("stopped")
    ledger.close()
    if hanging.is_set():
        os._exit(0)  # the hung body's worker thread would keep the interpreter from exiting
    return 0


if __name__ == "__main__":
    sys.exit(main())

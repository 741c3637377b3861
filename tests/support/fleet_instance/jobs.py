"""The benchmarks' instance (``--jobs M``): M per-second jobs, ``bench.j00000`` on, on a core Scheduler over a counting
proxy of ``--store`` (counting.py); or with ``--mode apscheduler`` the floor: a plain BackgroundScheduler with the same
jobs and no lock, whose executor hands each fire's scheduled time to the body (as mutexcron's own executor does).
Each line of its ``--ledger`` file is one ``os.write`` to an O_APPEND file (no fsync: a SIGKILL loses nothing the
process wrote), space-separated (bench/fleet_support.py reads them):

    W pid                          built, waiting for the --start-gate file
    G time                         the scheduler started
    B job fire time                a body started (job index, nominal fire time and start, epoch seconds)
    E job fire time                that body ended
    F job fire time                --trace: an acquire for this tick is about to be sent
    A job fire status token time holder  --trace: what it answered (holder: who held a busy lock)
    L job token sent answered ok   --trace: a release (when it was sent and answered; ok: 1 if it released)
    R job fire outcome lost holder --trace: the run record (lost: 1 if the lock was lost; holder: who held it)
    S time cpu {json}              every --stats-every s: os.times() user+system, store calls and round trips
    X time                         stopped (after SIGTERM)

Round trips are counted in the client: every request redis-py sends (a command, or a whole pipeline), or every
SQL statement Django sends plus BEGIN and COMMIT/ROLLBACK of each transaction (psycopg sends BEGIN on its own).
"""

from __future__ import annotations

import argparse
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mutexcron.stores import store_from_url
from tests.support.fleet_instance import setup_django, work
from tests.support.fleet_instance.counting import (
    COUNTS,
    CountingStore,
    count_redis_round_trips,
    count_sql_round_trips,
    job_index,
    stats_line,
)

HOLDER = re.compile(r"lock held by (\S+)")
NEVER = threading.Event()


def job_name(index: int) -> str:
    return f"bench.j{index:05d}"


class Out:
    """The instance's line file: one unbuffered write per line, from any thread."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, *fields: object) -> None:
        os.write(self._fd, (" ".join(map(str, fields)) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def body(out: Out, job: int, fire: float, seconds: float) -> None:
    """The job: record its start, work ``seconds`` (to the end: nothing cancels a benchmark's body), record its end."""
    out.line("B", job, f"{fire:.3f}", f"{time.time():.6f}")
    work(seconds, NEVER)
    out.line("E", job, f"{fire:.3f}", f"{time.time():.6f}")


def mutexcron_scheduler(args: argparse.Namespace, out: Out) -> Any:
    from mutexcron.records import JobContext, RunRecord
    from mutexcron.registry import Registry, mutex_cron
    from mutexcron.scheduling.scheduler import Scheduler

    fire_context = setup_django(args.django_settings)
    if fire_context is not None:
        count_sql_round_trips()
    if args.store.startswith(("redis", "rediss")):
        count_redis_round_trips()
    registry = Registry()
    for index in range(args.jobs):
        def tick(ctx: JobContext, _index: int = index) -> None:
            body(out, _index, ctx.fire_time.timestamp(), args.body_seconds)

        mutex_cron("* * * * * *", name=job_name(index), lease=args.lease, registry=registry)(tick)
    store = CountingStore(store_from_url(args.store), out if args.trace else None)
    scheduler = Scheduler(store, registry=registry, instance_id=args.instance, max_workers=args.max_workers,
                          fire_context=fire_context)

    def on_record(record: RunRecord) -> None:
        COUNTS.add(f"outcome.{record.outcome}")
        if args.trace and record.fire_time is not None and (job := job_index(record.job_name)) is not None:
            holder = HOLDER.search(record.error or "")
            out.line("R", job, f"{record.fire_time.timestamp():.3f}", record.outcome, int(bool(record.lock_lost)),
                     holder.group(1) if holder else "-")

    scheduler.add_listener(on_record)
    return scheduler


def apscheduler_floor(args: argparse.Namespace, out: Out) -> Any:
    """A plain BackgroundScheduler, no lock: the same jobs, the same coalescing, a pool of the same size."""
    from apscheduler.executors.base import BaseExecutor
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.cron import CronTrigger

    class FloorExecutor(BaseExecutor):
        """Runs each fire in a thread pool, passing its scheduled time to the body."""

        def __init__(self, workers: int) -> None:
            super().__init__()
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="floor")

        def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
            def run() -> None:
                try:
                    job.func(run_times[-1])
                finally:
                    self._run_job_success(job.id, [])

            self._pool.submit(run)

        def shutdown(self, wait: bool = True) -> None:
            self._pool.shutdown(wait=wait)

    aps = BackgroundScheduler(timezone=UTC, executors={"default": FloorExecutor(args.max_workers)},
                              job_defaults={"coalesce": True, "max_instances": 10_000, "misfire_grace_time": None})
    for index in range(args.jobs):
        def tick(run_time: datetime | None = None, _index: int = index) -> None:
            COUNTS.add("outcome.succeeded")
            assert run_time is not None  # FloorExecutor passes it
            body(out, _index, run_time.timestamp(), args.body_seconds)

        aps.add_job(tick, CronTrigger(second="*", timezone=UTC), id=job_name(index))
    return aps


class Jobs:
    """The M jobs on mutexcron, or on the floor; an S line every ``--stats-every`` seconds while they run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.floor = args.mode == "apscheduler"
        self.interval = args.stats_every
        self.out = Out(args.ledger)
        self.scheduler = (apscheduler_floor if self.floor else mutexcron_scheduler)(args, self.out)

    def waiting(self) -> None:
        self.out.line("W", os.getpid())

    def start(self) -> None:
        self.scheduler.start()
        self.out.line("G", f"{time.time():.6f}")
        self.every()

    def every(self) -> None:
        self.out.line(stats_line())

    def stop(self, started: bool) -> None:
        if started:
            self.scheduler.shutdown(wait=True, **({} if self.floor else {"timeout": timedelta(seconds=5)}))
            self.every()
            self.out.line("X", f"{time.time():.6f}")
        self.out.close()

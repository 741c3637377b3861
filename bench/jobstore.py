#!/usr/bin/env python
"""What the scheduler's APScheduler job store costs a fire: APScheduler's ``MemoryJobStore`` against mutexcron's
``SortedJobStore``. A benchmark report, not a test.

Each of M per-second jobs is due at the same instant, as in bench/fleet.py. For each tick the scheduler's loop
asks the store for the due jobs, then moves each to its next run time (``Job._modify`` and ``update_job``, what
APScheduler's ``_process_jobs`` does after each fire). Reported: µs per fire for that move and for the lookup of
the due jobs, the median of ``--rounds`` rounds of ``--ticks`` ticks.

    python bench/jobstore.py [--jobs M,M] [--ticks T] [--rounds R] [--json]

The exit status is 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from apscheduler.job import Job
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mutexcron.scheduling.jobstore import SortedJobStore  # noqa: E402

START = datetime(2026, 12, 6, 6, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def _nothing() -> None:
    return None


def one_round(store: MemoryJobStore, jobs: int, ticks: int) -> tuple[float, float]:
    """µs per fire of moving each due job to its next run time, and of finding the due jobs, over ``ticks``."""
    aps = BackgroundScheduler(timezone=UTC)
    trigger = CronTrigger(second="*", timezone=UTC)
    for index in range(jobs):
        store.add_job(Job(aps, id=f"job-{index:05d}", func=_nothing, trigger=trigger, executor="default", args=(),
                          kwargs={}, name=f"job-{index:05d}", misfire_grace_time=None, coalesce=True,
                          max_instances=1, next_run_time=START))
    moving = finding = 0.0
    for tick in range(ticks):
        now = START + tick * SECOND
        began = time.perf_counter()
        due = store.get_due_jobs(now)
        finding += time.perf_counter() - began
        assert len(due) == jobs, f"{len(due)} of {jobs} jobs due at tick {tick}"
        following = now + SECOND
        began = time.perf_counter()
        for job in due:
            job._modify(next_run_time=following)
            store.update_job(job)
        moving += time.perf_counter() - began
    fires = jobs * ticks
    return moving / fires * 1e6, finding / fires * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="100,1000,2000", metavar="M,M", help="jobs per store (default 100,1000,2000)")
    parser.add_argument("--ticks", type=int, default=20, metavar="T")
    parser.add_argument("--rounds", type=int, default=5, metavar="R")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    for jobs in [int(count) for count in args.jobs.split(",")]:
        for store_class in (MemoryJobStore, SortedJobStore):
            rounds = [one_round(store_class(), jobs, args.ticks) for _ in range(args.rounds)]
            results.append({"store": store_class.__name__, "jobs": jobs,
                            "move_us": round(statistics.median(r[0] for r in rounds), 2),
                            "due_us": round(statistics.median(r[1] for r in rounds), 3)})
    if args.json:
        print(json.dumps({"python": platform.python_version(), "results": results}, indent=2))
        return 0
    print(f"Python {platform.python_version()}: µs per fire, median of {args.rounds} rounds of {args.ticks} ticks")
    print(f"{'jobs':>6}  {'store':<16} {'move':>8} {'find due':>9}")
    for result in results:
        print(f"{result['jobs']:>6}  {result['store']:<16} {result['move_us']:>8.2f} {result['due_us']:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

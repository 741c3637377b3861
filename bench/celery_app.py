"""The Celery side of bench/fleet.py: Celery beat with celery-redbeat sending M per-second entries to a worker.

Configured from the environment by the benchmark (one run's own Redis database and key prefix):

    BENCH_CELERY_BROKER   redis://127.0.0.1:PORT/DB, the broker and redbeat's store
    BENCH_CELERY_PREFIX   redbeat's key prefix and the queue's name
    BENCH_CELERY_JOBS     how many entries (default 100)
    BENCH_CELERY_OUT      a directory: each worker process appends its B lines to a file of its own there

Each entry is ``schedule(1 s, relative=True)``: due at every whole second, as a ``* * * * * *`` cron is
(Celery's crontab stops at minutes). The body writes ``B job nominal start``, the same line as
tests/support/fleet_instance/jobs.py. The nominal time of a send is the whole second the entry was due at: Celery's
``remaining()`` rounds ``last_run_at + 1 s`` down to the second, so beat passes it to the task from the
entry's previous ``last_run_at`` (``BenchRedBeatScheduler.apply_async``); the first send of each entry has none.

    celery -A bench.celery_app worker ...
    celery -A bench.celery_app beat -S bench.celery_app.BenchRedBeatScheduler ...
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from celery import Celery
from celery.schedules import schedule
from celery.signals import beat_init, worker_ready
from redbeat import RedBeatScheduler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.fleet_instance.counting import count_redis_round_trips, stats_line

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/15")
PREFIX = os.environ.get("BENCH_CELERY_PREFIX", "mutexcron-bench-celery:")
JOBS = int(os.environ.get("BENCH_CELERY_JOBS", "100"))
OUT = Path(os.environ.get("BENCH_CELERY_OUT", "."))
count_redis_round_trips()  # in beat, and in the worker's main process, which talks to Redis for its pool

app = Celery("bench_fleet", broker=BROKER)
app.conf.update(
    timezone="UTC",
    enable_utc=True,
    task_ignore_result=True,
    task_default_queue=f"{PREFIX}queue",
    broker_connection_retry_on_startup=True,
    redbeat_redis_url=BROKER,
    redbeat_key_prefix=PREFIX,
    beat_schedule={
        f"bench.j{index:05d}": {"task": "bench.tick", "schedule": schedule(timedelta(seconds=1), relative=True),
                                "args": (index,)}
        for index in range(JOBS)
    },
)

_fd: int | None = None


@app.task(name="bench.tick")
def tick(job: int, nominal: float | None = None) -> None:
    """The job: one B line (its nominal time, or - for an entry's first send)."""
    global _fd
    if _fd is None:
        _fd = os.open(OUT / f"worker-{os.getpid()}.out", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    shown = "-" if nominal is None else f"{nominal:.3f}"
    os.write(_fd, f"B {job} {shown} {time.time():.6f}\n".encode())


class BenchRedBeatScheduler(RedBeatScheduler):  # type: ignore[misc]
    """RedBeatScheduler that tells each task the whole second it was due at (nothing else changes)."""

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
        last = entry.last_run_at
        nominal = None if last is None else float(math.floor(last.timestamp()) + 1)
        entry.kwargs = {**(entry.kwargs or {}), "nominal": nominal}  # the entry is read from Redis at each tick
        return super().apply_async(entry, producer=producer, advance=advance, **kwargs)


def _write_stats(role: str) -> None:
    """Every second, an S line (CPU, Redis round trips) to ``stats-<role>.out``, as the instances write theirs."""
    fd = os.open(OUT / f"stats-{role}.out", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def run() -> None:
        while True:
            os.write(fd, (stats_line() + "\n").encode())
            time.sleep(1.0)

    threading.Thread(target=run, name="bench-stats", daemon=True).start()


@worker_ready.connect
def _worker_ready(**kwargs: Any) -> None:
    _write_stats("worker")
    (OUT / "worker.ready").write_text(str(os.getpid()))


@beat_init.connect
def _beat_ready(**kwargs: Any) -> None:
    _write_stats("beat")
    (OUT / "beat.ready").write_text(str(os.getpid()))

"""One instance of a benchmark fleet (bench/fleet.py, bench/soak.py): M per-second jobs in one OS process.

    python -m bench.fleet_instance --out PATH --instance NAME --jobs M
        [--mode mutexcron|apscheduler] [--store URL] [--django-settings MODULE] [--max-workers N]
        [--lease S] [--body-seconds S] [--trace] [--gate PATH] [--stats-every S]

``--mode mutexcron`` runs a core ``Scheduler`` on ``--store`` (wrapped in a counting proxy); ``--mode
apscheduler`` is the floor: a plain ``BackgroundScheduler`` with the same jobs and no lock, whose executor hands
each fire's scheduled time to the body (as mutexcron's own executor does). Each line of ``--out`` is one
``os.write`` to an O_APPEND file (no fsync: a SIGKILL loses nothing the process wrote), space-separated:

    W pid                          built, waiting for the --gate file
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
import functools
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fleet_support import COUNTS, count_redis_round_trips, stats_line  # noqa: E402
from mutexcron._signals import SignalFlag  # noqa: E402
from mutexcron.errors import StoreUnavailable  # noqa: E402
from mutexcron.stores import (  # noqa: E402
    AcquireRequest,
    Acquisition,
    ControlStore,
    LockState,
    LockStore,
    ReleaseRequest,
    store_from_url,
)

JOB_PREFIX = "bench.j"
HOLDER = re.compile(r"lock held by (\S+)")


def job_name(index: int) -> str:
    return f"{JOB_PREFIX}{index:05d}"


class Out:
    """The instance's line file: one unbuffered write per line, from any thread."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, *fields: object) -> None:
        os.write(self._fd, (" ".join(map(str, fields)) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


# -- counting the store's calls and the client's round trips -------------------------------------------------


class CountingStore(LockStore, ControlStore):
    """A LockStore that counts every call into the store it wraps (``calls.<method>``); with ``trace`` it writes
    F and A lines around each scheduled acquire."""

    def __init__(self, inner: LockStore, out: Out | None = None) -> None:
        self.inner = inner
        self._out = out

    def __getattr__(self, name: str) -> Any:  # whatever else the scheduler may ask a store for
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def counted(*args: Any, **kwargs: Any) -> Any:
            COUNTS.add(f"calls.{name}")
            return value(*args, **kwargs)

        return counted

    def _count(self, name: str) -> None:
        COUNTS.add(f"calls.{name}")

    def seed(self, names: Iterable[str]) -> int:
        self._count("seed")
        return self.inner.seed(names)

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        self._count("acquire")
        out = self._out if fire_time is not None and name.startswith(JOB_PREFIX) else None
        if out is not None:
            job, fire = int(name[len(JOB_PREFIX):]), fire_time.timestamp()  # type: ignore[union-attr]
            out.line("F", job, fire, f"{time.time():.6f}")
        result = self.inner.acquire(name, owner=owner, lease=lease, fire_time=fire_time,
                                    schedule_version=schedule_version)
        if out is not None:
            out.line("A", job, fire, result.status.value, result.token if result.token is not None else "-",
                     f"{time.time():.6f}", result.holder or "-")
        return result

    @property  # type: ignore[misc]
    def batches_acquires(self) -> bool:  # type: ignore[override]
        return self.inner.batches_acquires

    def acquire_many(self, requests: Sequence[AcquireRequest]) -> list[Acquisition | StoreUnavailable]:
        """The inner store's acquire_many (one round trip on Redis), each request counted and traced as an acquire."""
        self._count("acquire_many")
        COUNTS.add("calls.acquire", len(requests))  # in one step: the count must not cost the fire path CPU
        if self._out is None:
            return self.inner.acquire_many(requests)
        traced = []
        for request in requests:
            if request.fire_time is not None and request.name.startswith(JOB_PREFIX):
                job, fire = int(request.name[len(JOB_PREFIX):]), request.fire_time.timestamp()
                self._out.line("F", job, fire, f"{time.time():.6f}")
                traced.append((job, fire))
            else:
                traced.append(None)
        results = self.inner.acquire_many(requests)
        done = f"{time.time():.6f}"
        for where, result in zip(traced, results, strict=True):
            if where is not None and isinstance(result, Acquisition):
                self._out.line("A", *where, result.status.value,
                               result.token if result.token is not None else "-", done, result.holder or "-")
        return results

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        self._count("renew")
        return self.inner.renew(name, token=token, lease=lease)

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        self._count("release")
        sent = time.time()
        released = self.inner.release(name, token=token, hold_at_least=hold_at_least, outcome=outcome, error=error)
        if self._out is not None and name.startswith(JOB_PREFIX):
            self._out.line("L", int(name[len(JOB_PREFIX):]), token, f"{sent:.6f}", f"{time.time():.6f}",
                           int(released))
        return released

    @property  # type: ignore[misc]
    def batches_releases(self) -> bool:  # type: ignore[override]
        return self.inner.batches_releases

    def release_many(self, requests: Sequence[ReleaseRequest]) -> list[bool | StoreUnavailable]:
        """The inner store's release_many (one round trip on Redis), each request counted and traced as a release."""
        self._count("release_many")
        sent = time.time()
        answers = self.inner.release_many(requests)
        answered = time.time()
        COUNTS.add("calls.release", len(requests))
        for request, answer in zip(requests, answers, strict=True):
            if self._out is not None and request.name.startswith(JOB_PREFIX):
                self._out.line("L", int(request.name[len(JOB_PREFIX):]), request.token, f"{sent:.6f}",
                               f"{answered:.6f}", int(answer is True))
        return answers

    def locks(self) -> list[LockState]:
        self._count("locks")
        return self.inner.locks()

    def read(self, name: str) -> LockState | None:
        self._count("read")
        return self.inner.read(name)

    def write(self, state: LockState, *, revision: int) -> bool:
        self._count("write")
        return self.inner.write(state, revision=revision)

    def now(self) -> datetime:
        self._count("now")
        return self.inner.now()

    def ping(self) -> None:
        self._count("ping")
        self.inner.ping()

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"<counting {self.inner!r}>"


def count_sql_round_trips() -> None:
    """Count every SQL statement Django sends (an execute wrapper on each new connection) and each commit and
    rollback of a transaction, which psycopg began with its own BEGIN."""
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.signals import connection_created

    def statement(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        COUNTS.add("rt.sql")
        return execute(sql, params, many, context)

    def created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        if statement not in connection.execute_wrappers:
            connection.execute_wrappers.append(statement)

    connection_created.connect(created, weak=False)
    for method in ("commit", "rollback"):
        original = getattr(BaseDatabaseWrapper, method)

        def counted(self: BaseDatabaseWrapper, _original: Callable[..., Any] = original, _key: str = method) -> Any:
            COUNTS.add(f"rt.sql_{_key}")
            return _original(self)

        setattr(BaseDatabaseWrapper, method, counted)


def setup_django(settings: str) -> Callable[[], AbstractContextManager[Any]]:
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    import django

    django.setup()
    count_sql_round_trips()
    from mutexcron_django.per_process import fresh_connections

    return fresh_connections


# -- the two kinds of instance --------------------------------------------------------------------------------


def body(out: Out, job: int, fire: float, seconds: float) -> None:
    """The job: record its start, work ``seconds`` (in steps: a SIGSTOP's time does not count), record its end."""
    out.line("B", job, f"{fire:.3f}", f"{time.time():.6f}")
    remaining = seconds
    while remaining > 0:
        step = min(remaining, 0.05)
        time.sleep(step)
        remaining -= step
    out.line("E", job, f"{fire:.3f}", f"{time.time():.6f}")


def mutexcron_scheduler(args: argparse.Namespace, out: Out) -> Any:
    from mutexcron.records import JobContext, RunRecord
    from mutexcron.registry import Registry, mutex_cron
    from mutexcron.scheduling.scheduler import Scheduler

    fire_context = setup_django(args.django_settings) if args.django_settings else None
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
        if args.trace and record.fire_time is not None and record.job_name.startswith(JOB_PREFIX):
            holder = HOLDER.search(record.error or "")
            out.line("R", int(record.job_name[len(JOB_PREFIX):]), f"{record.fire_time.timestamp():.3f}",
                     record.outcome, int(bool(record.lock_lost)), holder.group(1) if holder else "-")

    scheduler.add_listener(on_record)
    return scheduler


def apscheduler_floor(args: argparse.Namespace, out: Out) -> Any:
    """A plain BackgroundScheduler, no lock: the same jobs, the same coalescing, a pool of the same size."""
    from apscheduler.executors.base import BaseExecutor
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.cron import CronTrigger

    class FloorExecutor(BaseExecutor):  # type: ignore[misc]
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="this instance's line file")
    parser.add_argument("--instance", required=True, help="instance id")
    parser.add_argument("--jobs", type=int, default=100, help="per-second jobs (default 100)")
    parser.add_argument("--mode", choices=("mutexcron", "apscheduler"), default="mutexcron")
    parser.add_argument("--store", default="memory://", help="lock store URL (mutexcron mode)")
    parser.add_argument("--django-settings", help="configure Django with this settings module first")
    parser.add_argument("--max-workers", type=int, default=10, help="worker threads (default 10, as Scheduler's)")
    parser.add_argument("--lease", type=float, default=600.0, help="the jobs' lease in s (default 600, mutex_cron's)")
    parser.add_argument("--body-seconds", type=float, default=0.0, help="work in each body (default none)")
    parser.add_argument("--trace", action="store_true", help="write F, A and R lines (the soak's)")
    parser.add_argument("--gate", type=Path, help="start only once this file exists")
    parser.add_argument("--stats-every", type=float, default=1.0, help="seconds between S lines (default 1)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Out(args.out)
    stop = SignalFlag()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    scheduler = mutexcron_scheduler(args, out) if args.mode == "mutexcron" else apscheduler_floor(args, out)
    if args.gate is not None:
        out.line("W", os.getpid())
        while not args.gate.exists():
            if stop.wait(0.01):
                return 0
    scheduler.start()
    out.line("G", f"{time.time():.6f}")
    out.line(stats_line())
    while not stop.wait(args.stats_every):
        out.line(stats_line())
    if args.mode == "mutexcron":
        scheduler.shutdown(wait=True, timeout=timedelta(seconds=5))
    else:
        scheduler.shutdown(wait=True)
    out.line(stats_line())
    out.line("X", f"{time.time():.6f}")
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Fleet benchmark: N instance processes x M per-second jobs, against the APScheduler floor and Celery beat.

A benchmark report, not a test. Every measurement starts its processes, lets them fire for a warm-up, then
counts the ticks of a window of ``--seconds`` (default 20) whole seconds:

- **mutexcron redis**: N tests/support/fleet_instance processes, each a core ``Scheduler`` (a pool of ``--workers``
  threads) with the same M jobs
  (``* * * * * *``, a no-op body that records its start) on one Redis: a redis-server of the run's own on a free
  port unless ``--redis URL``, so that its INFO commandstats count this benchmark's commands alone;
- **mutexcron django/pg**: the same on ``django://`` (the Django SQL store) in a PostgreSQL database of the
  run's own (bench/fleet_settings.py: persistent connections), ``--pg-workers`` threads per instance;
- **mutexcron cluster**: the same on a Redis Cluster (``--cluster URL``, default the 3 masters on 127.0.0.1:7000-
  7002 that scripts/services.sh starts), if one answers and this mutexcron takes ``redis+cluster://`` URLs;
- **APScheduler floor**: the same N x M jobs on plain BackgroundSchedulers with the same pool, no lock (every
  instance runs every tick: the lateness that mutexcron adds to is this one), measured just before mutexcron at
  each pool size of ``--workers`` (default 10 and 20);
- **Celery beat + celery-redbeat**: one beat process (redbeat, the usual way to run beat safely: one leader lock)
  sends the same M per-second entries to one Celery worker (prefork, its default concurrency) on the same
  Redis server (its own database), which is what most users would pick instead (bench/celery_app.py);
- **mutexcron memory://**: one instance alone, no store round trip: a reference.

Reported for each: ticks run (job x tick), duplicates (must be 0), missed ticks, fire lateness p50/p90/p99/max
(body start minus nominal fire time, one clock), store round trips per tick (counted in each instance's client,
and by the private Redis server), CPU seconds per instance per minute (/proc), and the load average. Then a
sweep over M on Redis and PostgreSQL (``--sweep-seconds`` each, default 10) finds the largest job fires/s with
0 duplicates and 0 misses, and the targets are judged (p99 within 25 ms of the floor's and CPU per instance at
most 1.2x the floor's, at each pool size; 0 duplicates and 0 misses at 1,000 and 2,000 job fires/s on one Redis,
each tick run before the next at 1,000; lateness better than Celery beat's at every percentile).

    python bench/fleet.py [--instances N] [--jobs M] [--workers W,W] [--seconds S] [--sweep-seconds S]
                          [--sweep-redis M,M,...] [--sweep-postgres M,M,...] [--pg-workers W]
                          [--redis URL] [--cluster URL | --no-cluster] [--skip SYSTEM] [--json]

A default run takes about 10-12 minutes on 2 CPUs. The exit status is 0 whatever the figures. Everything is
removed afterwards: the private redis-server, the Redis keys of a unique prefix on --redis or the cluster, the
PostgreSQL database, the temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fleet_support import (  # noqa: E402
    BenchError,
    Instance,
    Lines,
    PrivateRedis,
    cpu_seconds,
    delete_redis_keys,
    instance_command,
    load,
    percentile,
    pg_params,
    postgres_connections,
    postgres_database,
    postgres_env,
    postgres_version,
    read_lines,
    round_trips,
    sleep_until,
    stats_between,
    store_calls,
)
from tests.support import wait_until as wait_for  # noqa: E402
from tests.support.fleet import Died, Launcher, Member  # noqa: E402

WARMUP = 3  # seconds of ticks after the last instance started, before the window
SETTLE = 10.0  # how long after the window its last ticks may still be run
TARGET_FLOOR_MS = 25.0  # p99 within this of the APScheduler floor's
TARGET_FIRES = 1000  # job fires/s across the fleet on one Redis, each tick run before the next
TARGET_CLEAN_FIRES = (1000, 2000)  # job fires/s on one Redis with 0 duplicates and 0 misses
TARGET_CPU_RATIO = 1.2  # instance CPU per minute at most this times the floor's (same pool size)
DEFAULT_CLUSTER = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"
During = Callable[[float, float], None]  # run beside a measurement's window, given its first and end tick (epoch s)
SYSTEMS = ("redis", "postgres", "cluster", "floor", "celery", "memory", "sweep")


@dataclass
class Measure:
    """One measurement: a system, N x M, a window of ticks, and what happened in it."""

    key: str
    label: str
    instances: int
    jobs: int
    workers: int = 10  # each instance's thread pool (the floor's too: BackgroundScheduler's executor)
    seconds: int = 0
    settings: str = ""
    load_start: str = ""
    load_end: str = ""
    expected: int = 0  # runs due in the window (job x tick; x instances for the floor)
    runs: int = 0
    duplicates: int = 0  # runs beyond one per job x tick (x instance for the floor)
    missed: int = 0
    missed_by_second: list[int] = field(default_factory=list)  # misses of each second of the window, in order
    lateness_ms: dict[str, float | None] = field(default_factory=dict)
    early: int = 0
    round_trips_per_tick: float | None = None  # client round trips per job x tick, whole fleet
    store_calls_per_tick: float | None = None
    server_commands_per_tick: float | None = None  # the private Redis server's count
    cpu_per_instance_min: float | None = None  # CPU seconds per instance per minute (mean)
    cpu_max_instance_min: float | None = None
    cpu_processes: dict[str, float] = field(default_factory=dict)
    server_cpu_min: float | None = None  # redis-server, or the PostgreSQL backends of the database
    pg_connections: int | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    skipped: str | None = None
    error: str | None = None

    @property
    def fires_per_s(self) -> float:
        return self.jobs if self.key != "floor" else self.jobs * self.instances

    @property
    def clean(self) -> bool:
        """0 duplicates and 0 misses (every tick ran, if late)."""
        return self.error is None and self.skipped is None and self.duplicates == 0 and self.missed == 0 \
            and self.runs > 0

    @property
    def on_time(self) -> bool:
        """Clean, and p99 lateness under the one-second tick: each tick ran before the next was due."""
        p99 = self.lateness_ms.get("p99")
        return self.clean and p99 is not None and p99 < 1000


def summarise(samples: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(samples, 50), "p90": percentile(samples, 90), "p99": percentile(samples, 99),
            "max": max(samples, default=None)}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- one fleet of instance processes --------------------------------------------------------------------------


class Fleet(Launcher[Instance]):
    """N instance processes started together through a gate file, measured over a window of ticks."""

    def __init__(self, directory: Path, measure: Measure, options: list[str], env: dict[str, str]) -> None:
        tag = f"{measure.key}-{measure.jobs}-w{measure.workers}-{uuid.uuid4().hex[:6]}"
        super().__init__(directory, Instance, env, gate=directory / f"{tag}.gate")
        self.measure = measure
        for n in range(measure.instances):
            name = f"{tag}-i{n}"
            self.spawn(name, instance_command(self.ledger(name), f"i{n}", measure.jobs, *options, "--start-gate",
                                              str(self.gate)))

    def lines(self) -> list[Lines]:
        return [member.lines() for member in self.members]

    def start(self) -> tuple[float, float]:
        """Open the gate once every instance is built; the window (first tick, end) after the warm-up."""
        self.open_gate(timeout=180)
        first = math.ceil(self.wait_ready(timeout=60)) + WARMUP
        return float(first), float(first + self.measure.seconds)


def measure_window(fleet_pids: dict[str, int], first: float, end: float, server: PrivateRedis | None,
                   pg_db: str | None, measure: Measure) -> None:
    """CPU of every process and the server's command count over the window (from 0.5 s before its first tick to
    0.5 s before its end: each tick's work falls after its whole second)."""
    sleep_until(first - 0.5)
    cpu0 = {name: cpu_seconds(pid) for name, pid in fleet_pids.items()}
    commands0 = server.commands() if server else None
    server_cpu0 = _server_cpu(server, pg_db)
    sleep_until((first + end) / 2)
    if pg_db:
        measure.pg_connections = postgres_connections(pg_db)
    sleep_until(end - 0.5)
    cpu1 = {name: cpu_seconds(pid) for name, pid in fleet_pids.items()}
    minutes = (end - first) / 60
    per = {name: (cpu1[name] - cpu0[name]) / minutes for name in fleet_pids}
    measure.cpu_processes = {name: round(v, 2) for name, v in per.items()}
    measure.cpu_per_instance_min = sum(per.values()) / len(per)
    measure.cpu_max_instance_min = max(per.values())
    if server is not None and commands0 is not None:
        ticks = measure.jobs * (end - first)
        measure.server_commands_per_tick = (server.commands() - commands0) / ticks
    server_cpu1 = _server_cpu(server, pg_db)
    if server_cpu0 is not None and server_cpu1 is not None:
        measure.server_cpu_min = (server_cpu1 - server_cpu0) / minutes


def _server_cpu(server: PrivateRedis | None, pg_db: str | None) -> float | None:
    if server is not None:
        return cpu_seconds(server.process.pid)
    if pg_db is not None:
        import psycopg

        with psycopg.connect(**pg_params("postgres")) as connection:
            pids = [row[0] for row in connection.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s", (pg_db,)).fetchall()]
        return sum(cpu_seconds(pid) for pid in pids)
    return None


def judge(measure: Measure, bodies: list[tuple[Any, int, float, float]], first: float, end: float,
          per_instance: bool) -> None:
    """Runs, duplicates, misses and lateness of the window's ticks. ``bodies``: (instance, job, fire, start)."""
    ticks = [float(t) for t in range(int(first), int(end))]
    keys: Counter[tuple[Any, ...]] = Counter()
    late: list[float] = []
    for instance, job, fire, start in bodies:
        if first <= fire < end:
            keys[(instance, job, fire) if per_instance else (job, fire)] += 1
            late.append((start - fire) * 1000)
    owners: list[Any] = list(range(measure.instances)) if per_instance else [None]
    expected = [(o, j, t) if per_instance else (j, t) for o in owners for j in range(measure.jobs) for t in ticks]
    measure.expected = len(expected)
    measure.runs = sum(keys.values())
    measure.duplicates = sum(n - 1 for n in keys.values() if n > 1)
    missed = [key[-1] for key in expected if keys[key] == 0]
    measure.missed = len(missed)
    by_second = Counter(int(tick) - int(first) for tick in missed)
    measure.missed_by_second = [by_second[second] for second in range(len(ticks))]
    measure.lateness_ms = summarise(late)
    measure.early = sum(1 for x in late if x < 0)


def run_instances(directory: Path, measure: Measure, options: list[str], *, env: dict[str, str] | None = None,
                  server: PrivateRedis | None = None, pg_db: str | None = None,
                  during: During | None = None) -> Measure:
    """Start the fleet, measure its window (``during(first, end)`` in a thread of its own meanwhile: the
    disturbance of bench/recovery.py), stop it, judge it."""
    measure.load_start = load()
    fleet = Fleet(directory, measure, options, env or {})
    beside: threading.Thread | None = None
    try:
        first, end = fleet.start()
        if during is not None:
            beside = threading.Thread(target=during, args=(first, end), name="bench-during", daemon=True)
            beside.start()
        measure_window({p.name: p.pid for p in fleet.members}, first, end, server, pg_db, measure)
        per_instance = measure.key == "floor"
        due = measure.jobs * measure.seconds * (measure.instances if per_instance else 1)

        def done() -> bool:
            fleet.assert_all_alive()
            count = sum(1 for lines in fleet.lines() for job, fire, _ in lines.bodies if first <= fire < end)
            return count >= due

        try:
            wait_for(done, SETTLE, "the window's last ticks", interval=0.25)
        except Died:
            raise
        except AssertionError:
            pass  # the ticks still unrun are judged missed
        measure.load_end = load()
    finally:
        fleet.terminate_all(timeout=20)
        if beside is not None:
            beside.join()
    all_lines = fleet.lines()
    bodies = [(n, job, fire, start) for n, lines in enumerate(all_lines) for job, fire, start in lines.bodies]
    judge(measure, bodies, first, end, per_instance=measure.key == "floor")
    counted = [stats_between(lines, first - 0.5, end - 0.5) for lines in all_lines]
    if all(c is not None for c in counted):
        per_second_rt = sum(round_trips(c[1]) / c[0] for c in counted if c)  # type: ignore[index]
        per_second_calls = sum(store_calls(c[1]) / c[0] for c in counted if c)  # type: ignore[index]
        if per_second_rt or per_second_calls:
            measure.round_trips_per_tick = per_second_rt / measure.jobs if per_second_rt else None
            measure.store_calls_per_tick = per_second_calls / measure.jobs
        outcomes: Counter[str] = Counter()
        for c in counted:
            outcomes.update({k.split(".", 1)[1]: v for k, v in c[1].items() if k.startswith("outcome.") and v})  # type: ignore[index]
        measure.outcomes = dict(outcomes)
    return measure


# -- the systems ----------------------------------------------------------------------------------------------


def mutexcron_redis(directory: Path, instances: int, jobs: int, seconds: int, url: str,
                    server: PrivateRedis | None, key: str = "redis", label: str = "mutexcron redis",
                    workers: int = 10, during: During | None = None) -> Measure:
    prefix = f"mutexcron-bench-fleet:{uuid.uuid4().hex[:10]}:"
    measure = Measure(key, label, instances, jobs, workers, seconds, settings=_pool(workers))
    joiner = "&" if "?" in url else "?"
    try:
        return run_instances(directory, measure, ["--store", f"{url}{joiner}prefix={prefix}",
                                                  "--max-workers", str(workers)], server=server, during=during)
    finally:
        with suppress(Exception):
            delete_redis_keys(url, prefix + "*")


def mutexcron_postgres(directory: Path, instances: int, jobs: int, seconds: int, workers: int) -> Measure:
    measure = Measure("postgres", "mutexcron django/pg", instances, jobs, workers, seconds,
                      settings=f"max_workers {workers}; CONN_MAX_AGE None")
    with postgres_database(directory) as name:
        return run_instances(directory, measure, ["--store", "django://default", "--django-settings",
                                                  "bench.fleet_settings", "--max-workers", str(workers)],
                             env=postgres_env(name), pg_db=name)


def mutexcron_memory(directory: Path, jobs: int, seconds: int) -> Measure:
    measure = Measure("memory", "mutexcron memory:// (1 instance)", 1, jobs, 10, seconds, settings=_pool(10))
    return run_instances(directory, measure, ["--store", "memory://"])


def apscheduler_floor(directory: Path, instances: int, jobs: int, seconds: int, workers: int = 10,
                      during: During | None = None) -> Measure:
    measure = Measure("floor", "APScheduler floor (no lock)", instances, jobs, workers, seconds,
                      settings=f"BackgroundScheduler, pool of {workers}")
    return run_instances(directory, measure, ["--mode", "apscheduler", "--max-workers", str(workers)], during=during)


def _pool(workers: int) -> str:
    return f"max_workers {workers}" + (" (default)" if workers == 10 else "")


def celery_redbeat(directory: Path, jobs: int, seconds: int, server: PrivateRedis) -> Measure:
    """One beat (redbeat) and one worker (prefork, default concurrency) on database 1 of the private server."""
    concurrency = os.cpu_count() or 1
    measure = Measure("celery", "Celery beat + redbeat", 2, jobs, concurrency, seconds,
                      settings=f"beat + 1 worker (prefork x {concurrency}, default)")
    measure.load_start = load()
    out = directory / f"celery-{uuid.uuid4().hex[:6]}"
    out.mkdir()
    env = {"BENCH_CELERY_BROKER": server.url(1), "BENCH_CELERY_PREFIX": f"mutexcron-bench-celery-{out.name}:",
           "BENCH_CELERY_JOBS": str(jobs), "BENCH_CELERY_OUT": str(out)}
    celery = [sys.executable, "-m", "celery", "-A", "bench.celery_app"]
    procs = Launcher(directory, Member, env)
    try:
        worker = procs.spawn(f"{out.name}-worker", [*celery, "worker", "--loglevel", "WARNING", "-n", f"{out.name}@%h"])
        procs.wait_ready([worker], 120, ready=lambda _: (out / "worker.ready").exists())
        beat = procs.spawn(f"{out.name}-beat", [*celery, "beat", "--loglevel", "WARNING", "-S",
                                                "bench.celery_app.BenchRedBeatScheduler",
                                                "--schedule", str(out / "beat-schedule")])
        procs.wait_ready([beat], 120, ready=lambda _: (out / "beat.ready").exists())
        procs.assert_all_alive()
        first = float(math.ceil(time.time()) + WARMUP)
        end = first + seconds
        measure_window({"beat": beat.pid, "worker": worker.pid}, first, end, server, None, measure)

        def bodies() -> list[tuple[Any, int, float, float]]:
            found = []
            for path in out.glob("worker-*.out"):
                for line in path.read_text().splitlines(keepends=True):
                    if line.endswith("\n"):
                        _, job, nominal, start = line.split()
                        if nominal != "-":
                            found.append((path.name, int(job), float(nominal), float(start)))
            return found

        with suppress(AssertionError):
            wait_for(lambda: sum(1 for b in bodies() if first <= b[2] < end) >= jobs * seconds, SETTLE,
                     "the window's last ticks", interval=0.25)
        measure.load_end = load()
        counted = [stats_between(read_lines(out / f"stats-{role}.out"), first - 0.5, end - 0.5)
                   for role in ("beat", "worker")]
        if all(counted):
            measure.round_trips_per_tick = sum(round_trips(c[1]) / c[0] for c in counted if c) / jobs
    finally:
        procs.terminate_all(timeout=20)
        with suppress(Exception):
            server.client.execute_command("SELECT", 1)
            server.client.flushdb()
            server.client.execute_command("SELECT", 0)
    judge(measure, bodies(), first, end, per_instance=False)
    return measure


def cluster_available(url: str) -> str | None:
    """None if a Redis Cluster answers at ``url`` and mutexcron takes the URL; else why not."""
    import redis

    first = url.split("://", 1)[1].split(",")[0].split("?")[0]
    host, _, port = first.partition(":")
    try:
        client = redis.Redis(host=host, port=int(port or 7000), socket_connect_timeout=1)
        info = client.execute_command("CLUSTER INFO")
        client.close()
    except (redis.RedisError, OSError) as error:
        return f"no Redis Cluster at {first} ({type(error).__name__}); scripts/services.sh starts one on 7000-7005"
    if isinstance(info, dict):
        state = str(info.get("cluster_state"))
    else:
        text = info.decode() if isinstance(info, bytes) else str(info)
        state = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                      if line.startswith("cluster_state:")), "?")
    if state != "ok":
        return f"the Redis Cluster at {first} is not ok (cluster_state {state})"
    try:
        from mutexcron.stores import store_from_url

        store_from_url(f"{url}?prefix=mutexcron-bench-probe:").close()
    except Exception as error:
        return f"this mutexcron does not take {url.split('://')[0]}:// URLs ({type(error).__name__}: {error})"
    return None


# -- the run --------------------------------------------------------------------------------------------------


@dataclass
class Report:
    header: dict[str, Any]
    measures: list[Measure] = field(default_factory=list)
    sweeps: dict[str, list[Measure]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def attempt(report: Report, what: str, run: Any) -> Measure | None:
    say(f"[{what}] load {load()} ...")
    started = time.monotonic()
    try:
        measure: Measure = run()
    except (BenchError, AssertionError) as error:
        say(f"[{what}] failed: {error}")
        report.skipped[what] = str(error).splitlines()[0]
        return None
    except Exception as error:
        traceback.print_exc()
        report.skipped[what] = f"{type(error).__name__}: {error}"
        return None
    late = measure.lateness_ms
    say(f"[{what}] {measure.runs} runs, {measure.duplicates} duplicates, {measure.missed} missed, "
        f"p50 {_ms(late.get('p50'))} p99 {_ms(late.get('p99'))} ms ({time.monotonic() - started:.0f} s)")
    return measure


def sweep(report: Report, name: str, sizes: list[int], run: Any, start: Measure | None) -> None:
    """M in ascending order (the main measurement reused for its M) until a run has a duplicate or a miss."""
    points: list[Measure] = []
    for jobs in sorted(set(sizes) | ({start.jobs} if start else set())):
        if start is not None and jobs == start.jobs:
            measure: Measure | None = start
        else:
            measure = attempt(report, f"sweep {name} {jobs} jobs", lambda jobs=jobs: run(jobs))
        if measure is None:
            break
        points.append(measure)
        if not measure.clean:
            break
    report.sweeps[name] = points


def largest_clean(points: list[Measure], on_time: bool = False) -> Measure | None:
    clean = [p for p in points if (p.on_time if on_time else p.clean)]
    return max(clean, key=lambda p: p.jobs) if clean else None


def run(args: argparse.Namespace, directory: Path, report: Report) -> None:
    skip = set(args.skip)
    n, m, seconds = args.instances, args.jobs, args.seconds
    with ExitStack() as stack:
        server: PrivateRedis | None = None
        if args.redis:
            redis_url = args.redis
        else:
            server = stack.enter_context(_closing(PrivateRedis(directory)))
            redis_url = server.url(0)
        report.header["redis"] = f"Redis {server.version if server else '?'} at {redis_url}" + (
            " (private redis-server)" if server else "")
        by_key: dict[tuple[str, int], Measure] = {}
        pools, first_pool = args.workers, args.workers[0]

        def add(measure: Measure | None) -> Measure | None:
            if measure is not None:
                report.measures.append(measure)
                by_key[(measure.key, measure.workers)] = measure
            return measure

        cluster_why = None if "cluster" in skip or not args.cluster else cluster_available(args.cluster)
        if cluster_why:
            say(f"[cluster] skipped: {cluster_why}")
            report.skipped["cluster"] = cluster_why
        for w in pools:  # the floor and mutexcron on the same pool size, one after the other
            if "floor" not in skip:
                add(attempt(report, f"APScheduler floor {n} x {m}, {w} workers",
                            lambda w=w: apscheduler_floor(directory, n, m, seconds, w)))
            if "redis" not in skip:
                add(attempt(report, f"mutexcron redis {n} x {m}, {w} workers",
                            lambda w=w: mutexcron_redis(directory, n, m, seconds, redis_url, server, workers=w)))
            if "cluster" not in skip and args.cluster and not cluster_why:
                add(attempt(report, f"mutexcron cluster {n} x {m}, {w} workers",
                            lambda w=w: mutexcron_redis(directory, n, m, seconds, args.cluster, None, key="cluster",
                                                        label="mutexcron redis cluster", workers=w)))
        if "celery" not in skip:
            if server is None:
                report.skipped["celery"] = "needs the private redis-server (no --redis)"
            else:
                private = server
                add(attempt(report, f"Celery beat + redbeat {m} entries",
                            lambda: celery_redbeat(directory, m, seconds, private)))
        if "postgres" not in skip:
            report.header["postgres"] = f"PostgreSQL {postgres_version()} at {pg_params('')['host']}"
            add(attempt(report, f"mutexcron django/pg {n} x {m}",
                        lambda: mutexcron_postgres(directory, n, m, seconds, args.pg_workers)))
        if "memory" not in skip:
            add(attempt(report, f"mutexcron memory:// 1 x {m}", lambda: mutexcron_memory(directory, m, seconds)))
        if "sweep" in skip:
            return
        s = args.sweep_seconds
        if "redis" not in skip:
            sweep(report, "redis", args.sweep_redis,
                  lambda jobs: mutexcron_redis(directory, n, jobs, s, redis_url, server, workers=first_pool),
                  by_key.get(("redis", first_pool)))
        if "postgres" not in skip:
            sweep(report, "postgres", args.sweep_postgres,
                  lambda jobs: mutexcron_postgres(directory, n, jobs, s, args.pg_workers),
                  by_key.get(("postgres", args.pg_workers)))
        if ("cluster", first_pool) in by_key:
            sweep(report, "cluster", args.sweep_redis,
                  lambda jobs: mutexcron_redis(directory, n, jobs, s, args.cluster, None, key="cluster",
                                               label="mutexcron redis cluster", workers=first_pool),
                  by_key.get(("cluster", first_pool)))


@contextmanager
def _closing(server: PrivateRedis) -> Iterator[PrivateRedis]:
    try:
        yield server
    finally:
        server.close()


# -- report ---------------------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def targets(report: Report) -> list[dict[str, Any]]:
    floors = {m.workers: m for m in report.measures if m.key == "floor"}
    first_floor = next(iter(floors.values()), None)
    out: list[dict[str, Any]] = []
    for mine in report.measures:
        if mine.key not in ("redis", "postgres", "cluster"):
            continue
        # The floor of the same pool size; PostgreSQL's instances run --pg-workers threads (its connections are the
        # bound), measured against the first floor.
        floor = floors.get(mine.workers) if mine.key != "postgres" else first_floor
        if floor is None:
            continue
        pools = f"{mine.workers} workers" + ("" if floor.workers == mine.workers else f"; floor {floor.workers}")
        if mine.lateness_ms.get("p99") is not None and floor.lateness_ms.get("p99") is not None:
            gap = mine.lateness_ms["p99"] - floor.lateness_ms["p99"]  # type: ignore[operator]
            out.append({"target": f"{mine.label} p99 within {TARGET_FLOOR_MS:g} ms of the floor's ({pools})",
                        "value": f"{_ms(mine.lateness_ms['p99'])} - {_ms(floor.lateness_ms['p99'])} = {_ms(gap)} ms",
                        "verdict": "PASS" if gap <= TARGET_FLOOR_MS else "MISS"})
        if mine.key != "postgres" and mine.cpu_per_instance_min is not None and floor.cpu_per_instance_min:
            ratio = mine.cpu_per_instance_min / floor.cpu_per_instance_min
            out.append({"target": f"{mine.label} CPU per instance at most {TARGET_CPU_RATIO:g}x the floor's ({pools})",
                        "value": f"{mine.cpu_per_instance_min:.2f} / {floor.cpu_per_instance_min:.2f} s/min = "
                                 f"{ratio:.2f}x",
                        "verdict": "PASS" if ratio <= TARGET_CPU_RATIO else "MISS"})
    points = report.sweeps.get("redis", [])
    if points:
        best, timely = largest_clean(points), largest_clean(points, on_time=True)
        value = (f"{timely.jobs:,} job fires/s ({timely.jobs * timely.instances:,} instance fires/s) with p99 under "
                 "the 1 s tick" if timely else "none with p99 under the 1 s tick")
        value += f"; {best.jobs:,}/s with 0 duplicates and 0 misses, however late" if best else ""
        if all(p.clean for p in points):
            value += " (the sweep's largest)"
        out.append({"target": f"job fires/s on one Redis across {points[0].instances} instances, 0 duplicates, "
                              f"0 misses, each tick run before the next: at least {TARGET_FIRES:,}",
                    "value": value, "verdict": "PASS" if timely and timely.jobs >= TARGET_FIRES else "MISS"})
        for fires in TARGET_CLEAN_FIRES:
            point = next((p for p in points if p.jobs == fires), None)
            value = ("not measured (the sweep stopped before it, or --sweep-redis leaves it out)" if point is None
                     else f"{point.runs:,} runs, {point.duplicates} duplicates, {point.missed} missed")
            out.append({"target": f"0 duplicates and 0 misses at {fires:,} job fires/s on one Redis",
                        "value": value, "verdict": "PASS" if point is not None and point.clean else "MISS"})
    celery = next((m for m in report.measures if m.key == "celery"), None)
    redis = next((m for m in report.measures if m.key == "redis"), None)
    if celery and redis and celery.lateness_ms.get("p50") is not None and redis.lateness_ms.get("p50") is not None:
        worse = [p for p in ("p50", "p90", "p99", "max")
                 if (redis.lateness_ms[p] or 0) >= (celery.lateness_ms[p] or 0)]
        value = ", ".join(f"{p} {_ms(redis.lateness_ms[p])} vs {_ms(celery.lateness_ms[p])}"
                          for p in ("p50", "p90", "p99", "max"))
        out.append({"target": f"mutexcron redis ({redis.workers} workers) lateness better than Celery beat's at "
                              "every percentile",
                    "value": value + " ms", "verdict": "MISS" if worse else "PASS"})
    return out


ROW = ("{label:<34} {shape:>8} {workers:>7} {runs:>7} {dup:>4} {missed:>6} {p50:>7} {p90:>7} {p99:>7} {max:>7} "
       "{rt:>7} {cpu:>7}  {load:<15}")


def print_table(measures: list[Measure]) -> None:
    head = ROW.format(label="system", shape="N x M", workers="workers", runs="runs", dup="dup", missed="missed",
                      p50="p50", p90="p90", p99="p99", max="max", rt="rt/tick", cpu="cpu/min", load="load (1 5 15)")
    print(head)
    print("-" * len(head))
    for m in measures:
        late = m.lateness_ms
        shape = f"{m.instances} x {m.jobs}" if m.key != "celery" else f"1 x {m.jobs}"
        print(ROW.format(label=m.label[:34], shape=shape, workers=m.workers,
                         runs=f"{m.runs:,}", dup=m.duplicates, missed=m.missed, p50=_ms(late.get("p50")),
                         p90=_ms(late.get("p90")), p99=_ms(late.get("p99")), max=_ms(late.get("max")),
                         rt=_num(m.round_trips_per_tick), cpu=_num(m.cpu_per_instance_min), load=m.load_start))


def print_report(report: Report) -> None:
    h = report.header
    print("mutexcron fleet: N instances x M per-second jobs; fire lateness = body start - nominal fire time")
    print(f"Python {h['python']}, {h['cpus']} CPUs, load average {h['load']} at the start; "
          f"{h['seconds']} s windows ({h['sweep_seconds']} s in the sweeps) after {WARMUP} s of warm-up; "
          + ", ".join(f"{k} {v}" for k, v in h["versions"].items()))
    for key in ("redis", "postgres"):
        if key in h:
            print(f"{key}: {h[key]}")
    print()
    print_table(report.measures)
    print("  runs: job x tick bodies in the window (the floor: x instances, no lock); dup: runs beyond one; "
          f"missed: not run by {SETTLE:g} s after the window; p50..max: lateness in ms;")
    print("  rt/tick: round trips to the store per job x tick, whole fleet, counted in the clients (Celery: beat and "
          "the worker to Redis);")
    print("  cpu/min: CPU seconds per instance per minute (Celery: the mean of beat and of the worker with its pool)")
    for m in report.measures:
        extra = [m.settings]
        if m.cpu_processes and m.key == "celery":
            extra.append("CPU s/min " + ", ".join(f"{k} {v:.2f}" for k, v in m.cpu_processes.items()))
        if m.round_trips_per_tick is not None and m.key not in ("celery", "floor", "memory"):
            extra.append(f"{m.round_trips_per_tick / m.instances:.2f} round trips per instance per job x tick")
        if m.server_commands_per_tick is not None:
            extra.append(f"Redis ran {m.server_commands_per_tick:.1f} commands per job x tick (scripts' own included)")
        if m.server_cpu_min is not None:
            extra.append(f"server CPU {m.server_cpu_min:.2f} s/min")
        if m.pg_connections is not None:
            extra.append(f"{m.pg_connections} connections to its database")
        if m.store_calls_per_tick is not None:
            extra.append(f"{m.store_calls_per_tick:.2f} store calls per job x tick")
        if m.early:
            extra.append(f"{m.early} early")
        print(f"  {m.label}: " + "; ".join(e for e in extra if e))
    for name, points in report.sweeps.items():
        print()
        print(f"Sweep over M on {name} ({points[0].instances} instances): "
              "the largest job fires/s with 0 duplicates and 0 misses")
        print_table(points)
        best, timely = largest_clean(points), largest_clean(points, on_time=True)
        print(f"  largest with 0 duplicates and 0 misses: {best.jobs:,} job fires/s" if best else
              "  largest with 0 duplicates and 0 misses: none")
        print(f"  largest also with p99 under the 1 s tick: {timely.jobs:,} job fires/s" if timely else
              "  largest also with p99 under the 1 s tick: none")
    if report.skipped:
        print()
        for what, why in report.skipped.items():
            print(f"skipped: {what}: {why}")
    print()
    print("Targets")
    for target in targets(report):
        print(f"  {target['verdict']:<4}  {target['target']}: {target['value']}")


def to_json(report: Report) -> dict[str, Any]:
    def one(m: Measure) -> dict[str, Any]:
        data = asdict(m)
        data["fires_per_s"] = m.fires_per_s
        data["clean"] = m.clean
        data["on_time"] = m.on_time
        return data

    return {"benchmark": "mutexcron fleet", **report.header, "measures": [one(m) for m in report.measures],
            "sweeps": {k: {"points": [one(p) for p in v],
                           "largest_clean_jobs": (b.jobs if (b := largest_clean(v)) else None),
                           "largest_on_time_jobs": (t.jobs if (t := largest_clean(v, on_time=True)) else None)}
                       for k, v in report.sweeps.items()},
            "skipped": report.skipped, "targets": targets(report)}


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=8, metavar="N", help="instance processes (default 8)")
    parser.add_argument("--jobs", type=int, default=100, metavar="M", help="per-second jobs (default 100)")
    parser.add_argument("--seconds", type=int, default=20, metavar="S", help="window of each measurement (default 20)")
    parser.add_argument("--sweep-seconds", type=int, default=10, metavar="S", help="window of each sweep point")
    parser.add_argument("--workers", type=_sizes, default=[10, 20], metavar="W,W",
                        help="the thread pool of each instance, mutexcron's and the floor's alike, one measurement "
                             "of each per size (default 10,20; the sweeps use the first)")
    parser.add_argument("--sweep-redis", type=_sizes, default=[200, 400, 700, 1000, 1400, 2000], metavar="M,M",
                        help="job counts of the Redis (and cluster) sweep, besides --jobs (default "
                             "200,400,700,1000,1400,2000)")
    parser.add_argument("--sweep-postgres", type=_sizes, default=[25, 50, 200], metavar="M,M",
                        help="job counts of the PostgreSQL sweep, besides --jobs (default 25,50,200)")
    parser.add_argument("--pg-workers", type=int, default=4, metavar="W",
                        help="max_workers of each instance on PostgreSQL (default 4: 8 instances then hold about "
                             "48 connections of the server's 100)")
    parser.add_argument("--redis", metavar="URL", help="an existing Redis server (default: a private redis-server)")
    parser.add_argument("--cluster", metavar="URL", default=DEFAULT_CLUSTER,
                        help=f"the Redis Cluster (default {DEFAULT_CLUSTER})")
    parser.add_argument("--no-cluster", dest="cluster", action="store_const", const=None, help="leave it out")
    parser.add_argument("--skip", action="append", choices=SYSTEMS, default=[], help="leave a system out")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--json-file", type=Path, metavar="PATH", help="also write the JSON to PATH")
    args = parser.parse_args(argv)
    if args.instances < 1 or args.jobs < 1 or args.seconds < 2 or args.sweep_seconds < 2:
        parser.error("--instances and --jobs must be at least 1, --seconds and --sweep-seconds at least 2")
    if not args.workers or min(args.workers) < 1:
        parser.error(f"--workers must list pool sizes of at least 1, not {args.workers}")

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # a kill cleans up as Ctrl-C does

    signal.signal(signal.SIGTERM, interrupted)
    report = Report({
        "python": platform.python_version(), "cpus": os.cpu_count(), "load": load(), "instances": args.instances,
        "workers": args.workers,
        "jobs": args.jobs, "seconds": args.seconds, "sweep_seconds": args.sweep_seconds,
        "versions": {name: _version(name) for name in ("APScheduler", "redis", "celery", "celery-redbeat",
                                                        "Django", "psycopg")},
    })
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutexcron-bench-fleet-") as tmp:
        try:
            run(args, Path(tmp), report)
        except KeyboardInterrupt:
            say("interrupted: cleaning up")
    report.header["run_seconds"] = round(time.monotonic() - started)
    report.header["load_end"] = load()
    if args.json_file:
        args.json_file.write_text(json.dumps(to_json(report), indent=2) + "\n")
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print_report(report)
        print(f"\n(run took {report.header['run_seconds']} s; load average {report.header['load_end']} at the end)")
    return 0


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())

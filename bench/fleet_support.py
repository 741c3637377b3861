"""What bench/fleet.py and bench/soak.py share: instance processes (tests/support/fleet_instance, launched with
tests.support.fleet), their line files, a private redis-server, a private PostgreSQL database, CPU time from /proc,
percentiles. No sleep here stands for a condition: every wait polls one, with a deadline (tests.support.wait_until).
The bench needs the repository root on sys.path (its scripts put it there)."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.django.fleet_support import pg_params as pg_params  # the tests' server: MUTEXCRON_TEST_PG_*
from tests.support import wait_until as wait_for  # AssertionError on its timeout
from tests.support.fleet import Launcher, Member

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """A run could not be completed (a process died, a server is missing)."""


def sleep_until(moment: float) -> None:
    """Wait for a moment of the wall clock (the benchmark's schedule, not a synchronisation)."""
    while (left := moment - time.time()) > 0:
        time.sleep(min(left, 0.5))


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# -- CPU time of a process and its children, from /proc ---------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and of its live descendants (a Celery worker's pool), in seconds."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children[int(fields[1])].append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        fields = _stat_fields(current)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        todo.extend(children.get(current, ()))
    return total / CLOCK_TICKS


# -- the instances ------------------------------------------------------------------------------------------


def instance_command(out: Path, instance: str, jobs: int, *options: str) -> list[str]:
    """tests/support/fleet_instance with ``jobs`` per-second jobs, writing its lines to ``out``: mutex_cron's default
    lease and no work in the bodies, unless ``options`` say otherwise."""
    return [sys.executable, "-m", "tests.support.fleet_instance", "--ledger", str(out), "--instance", instance,
            "--jobs", str(jobs), "--lease", "600", "--body-seconds", "0", *options]


class Instance(Member):
    """An instance process of a benchmark: built and waiting at the gate (W), ready once its scheduler started (G)."""

    SUFFIX = ".out"

    def lines(self) -> Lines:
        return read_lines(self.ledger)

    def waiting(self) -> bool:
        return self.lines().waiting

    def ready(self) -> float | None:
        return self.lines().started


# -- the instances' line files ----------------------------------------------------------------------------


@dataclass
class Lines:
    """The parsed lines of one instance's file (see tests/support/fleet_instance/jobs.py)."""

    path: Path
    waiting: bool = False
    started: float | None = None
    stopped: float | None = None
    bodies: list[tuple[int, float, float]] = field(default_factory=list)  # job, fire, start
    ends: set[tuple[int, float]] = field(default_factory=set)
    fires: dict[tuple[int, float], list[float]] = field(default_factory=dict)  # -> when each acquire was sent
    # -> (status, when, holder of a busy lock)
    answers: dict[tuple[int, float], list[tuple[str, float, str]]] = field(default_factory=dict)
    records: dict[tuple[int, float], tuple[str, bool, str]] = field(default_factory=dict)
    releases: list[tuple[int, float, float]] = field(default_factory=list)  # job, sent, answered
    stats: list[tuple[float, float, dict[str, int]]] = field(default_factory=list)


def read_lines(path: Path) -> Lines:
    lines = Lines(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return lines
    for raw in text.splitlines(keepends=True):
        if not raw.endswith("\n"):
            break  # being written
        kind, _, rest = raw.rstrip("\n").partition(" ")
        parts = rest.split(" ")
        if kind == "B":
            lines.bodies.append((int(parts[0]), float(parts[1]), float(parts[2])))
        elif kind == "E":
            lines.ends.add((int(parts[0]), float(parts[1])))
        elif kind == "F":
            lines.fires.setdefault((int(parts[0]), round(float(parts[1]), 3)), []).append(float(parts[2]))
        elif kind == "A":
            lines.answers.setdefault((int(parts[0]), round(float(parts[1]), 3)), []).append(
                (parts[2], float(parts[4]), parts[5]))
        elif kind == "L":
            lines.releases.append((int(parts[0]), float(parts[2]), float(parts[3])))
        elif kind == "R":
            lines.records[(int(parts[0]), float(parts[1]))] = (parts[2], parts[3] == "1", parts[4])
        elif kind == "S":
            lines.stats.append((float(parts[0]), float(parts[1]), json.loads(rest.split(" ", 2)[2])))
        elif kind == "W":
            lines.waiting = True
        elif kind == "G":
            lines.started = float(parts[0])
        elif kind == "X":
            lines.stopped = float(parts[0])
    return lines


def stats_between(lines: Lines, start: float, end: float) -> tuple[float, dict[str, int]] | None:
    """(seconds, counter deltas) between the first S line at or after ``start`` and the last at or before
    ``end``: what the instance counted over (about) the window."""
    inside = [s for s in lines.stats if start <= s[0] <= end]
    if len(inside) < 2:
        return None
    (t0, _, c0), (t1, _, c1) = inside[0], inside[-1]
    keys = set(c0) | set(c1)
    return t1 - t0, {k: c1.get(k, 0) - c0.get(k, 0) for k in keys}


def round_trips(counts: dict[str, int]) -> int:
    """Client round trips from an instance's counters: Redis requests, or SQL statements plus
    BEGIN and COMMIT/ROLLBACK of each transaction."""
    transactions = counts.get("rt.sql_commit", 0) + counts.get("rt.sql_rollback", 0)
    return counts.get("rt.redis", 0) + counts.get("rt.sql", 0) + 2 * transactions


def store_calls(counts: dict[str, int]) -> int:
    return sum(v for k, v in counts.items() if k.startswith("calls."))


# -- servers ----------------------------------------------------------------------------------------------


class PrivateRedis:
    """A redis-server of the benchmark's own on a free port of 127.0.0.1, without persistence: its INFO
    commandstats count this benchmark's commands alone."""

    def __init__(self, directory: Path) -> None:
        if shutil.which("redis-server") is None:
            raise BenchError("redis-server is not installed")
        self.port = free_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(directory), "--logfile", str(directory / "redis.log")],
            stdout=subprocess.DEVNULL)
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)

        def answers() -> bool:
            if self.process.poll() is not None:
                raise BenchError(f"redis-server exited on port {self.port}")
            try:
                return bool(self.client.ping())
            except redis.ConnectionError:
                return False

        wait_for(answers, 10, f"redis-server on port {self.port}")
        self.version = str(self.client.info("server").get("redis_version", "?"))

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def commands(self) -> int:
        """Every command the server ran so far (INFO commandstats, minus the INFO calls themselves)."""
        stats = self.client.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")

    def close(self) -> None:
        self.client.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def postgres_database(directory: Path) -> Iterator[str]:
    """CREATE DATABASE mutexcron_bench_<hex>, migrated for mutexcron_django (bench/fleet_settings.py); dropped
    afterwards whatever happens."""
    import psycopg

    name = f"mutexcron_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(**pg_params("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        migrate = Launcher(directory, Member).spawn(
            f"migrate-{name}", [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"],
            DJANGO_SETTINGS_MODULE="bench.fleet_settings", **postgres_env(name))
        if migrate.wait_exit(120) != 0:
            raise BenchError(f"migrate failed:\n{migrate.tail()}")
        yield name
    finally:
        with psycopg.connect(**pg_params("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def postgres_env(name: str) -> dict[str, str]:
    """The environment of a process of bench/fleet_settings.py on database ``name``."""
    return {"FLEET_DB_ENGINE": "postgresql", "FLEET_DB_NAME": name}


def postgres_version() -> str:
    import psycopg

    with psycopg.connect(**pg_params("postgres")) as connection:
        row = connection.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


def postgres_connections(dbname: str) -> int:
    import psycopg

    with psycopg.connect(**pg_params("postgres")) as connection:
        row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (dbname,)).fetchone()
    return int(row[0]) if row else 0


def delete_redis_keys(url: str, pattern: str) -> int:
    """Delete the keys matching ``pattern`` (on every primary of a cluster)."""
    import redis
    import redis.cluster

    client: Any = (redis.cluster.RedisCluster.from_url(url.replace("redis+cluster://", "redis://").split(",")[0])
                   if url.startswith("redis+cluster://") else redis.Redis.from_url(url))
    deleted = 0
    try:
        for key in list(client.scan_iter(match=pattern, count=1000)):
            deleted += int(client.delete(key))
    finally:
        client.close()
    return deleted

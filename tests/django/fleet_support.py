"""Helpers of the multi-process Django tests: processes in their own groups, ledgers, logs, JobRun history.

The processes run the fleet test site (tests/django/fleet_settings.py, configured through FLEET_* variables):
its one job, ``fleet_django.tick``, fires every second, and its body appends a line to the ledger of the
process that ran it (tests/django/fleet_app/cron.py). Nothing here sleeps to synchronise: every wait polls
a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from tests.support.fleet import Launcher, Member
from tests.support.servers import free_port as free_port  # the fleet tests import it from here

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "django"
MANAGE = HERE / "manage.py"
JOB = "fleet_django.tick"
STARTED = re.compile(r"mutexcron scheduler started in process (\d+)")
RAN = ("succeeded", "failed")
SKIPS = ("skipped_already_ran", "skipped_busy")
T = TypeVar("T")


def now() -> datetime:
    return datetime.now(UTC)


def holds_for(check: Callable[[], None], seconds: float, interval: float = 0.1) -> None:
    """Run ``check`` (which asserts) again and again for ``seconds``: a property that must hold throughout."""
    deadline = time.monotonic() + seconds
    while True:
        check()
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def parent_pid(pid: int) -> int:
    """The parent of ``pid``, from /proc (the 4th field of /proc/<pid>/stat, after the parenthesised name)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def http_get(url: str, timeout: float = 5) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode()
    except OSError:
        return None


def _aware(value: datetime | str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# -- databases ------------------------------------------------------------------------------------------


@dataclass
class Database:
    """One test's own database: a SQLite file or a fresh PostgreSQL database; ``env`` configures the site."""

    engine: str  # "sqlite" or "postgresql"
    name: str

    @property
    def env(self) -> dict[str, str]:
        return {"FLEET_DB_ENGINE": self.engine, "FLEET_DB_NAME": self.name}

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        if self.engine == "sqlite":
            connection = sqlite3.connect(self.name, timeout=20)
            try:
                return connection.execute(sql).fetchall()
            finally:
                connection.close()
        import psycopg

        with psycopg.connect(**pg_params(self.name)) as connection:
            return connection.execute(sql).fetchall()

    def job_runs(self, job: str = JOB) -> list[dict[str, Any]]:
        """The JobRun history of ``job``, oldest first, as dicts with aware datetimes; ``fired`` is the instance
        of each fire folded into the row (from ``fired_by``: "<instance> <lateness>" lines)."""
        rows = self.query(
            "SELECT fire_time, instance_id, outcome, token, manual, error, tick_key, fired_count, fired_by "
            f"FROM mutexcron_jobrun WHERE job_name = '{job}' ORDER BY id"
        )
        return [
            {"fire_time": _aware(fire), "instance": instance, "outcome": outcome, "token": token,
             "manual": bool(manual), "error": error, "tick_key": tick_key, "fired_count": fired_count,
             "fired": [line.rpartition(" ")[0] for line in (fired_by or "").splitlines() if line.strip()]}
            for fire, instance, outcome, token, manual, error, tick_key, fired_count, fired_by in rows
        ]


def pg_params(dbname: str) -> dict[str, Any]:
    return {
        "host": os.environ.get("MUTEXCRON_TEST_PG_HOST", "127.0.0.1"),
        "port": int(os.environ.get("MUTEXCRON_TEST_PG_PORT", "5432")),
        "user": os.environ.get("MUTEXCRON_TEST_PG_USER", "postgres"),
        "dbname": dbname,
        "connect_timeout": 10,
    }


@contextmanager
def sqlite_database(directory: Path) -> Iterator[Database]:
    yield Database("sqlite", str(directory / "fleet.sqlite3"))


@contextmanager
def postgres_database() -> Iterator[Database]:
    """CREATE DATABASE mutexcron_fleet_<random> on the server's ``test`` database; dropped afterwards."""
    import psycopg

    name = f"mutexcron_fleet_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(**pg_params("test"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Database("postgresql", name)
    finally:
        with psycopg.connect(**pg_params("test"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- processes ------------------------------------------------------------------------------------------


class Proc(Member):
    """A process of the fleet test site, in a process group of its own; ready once it started its scheduler."""

    def started_pids(self) -> list[int]:
        """The pid of every "mutexcron scheduler started in process <pid>" line, in order."""
        return [int(m.group(1)) for m in STARTED.finditer(self.text())]

    def ready(self) -> list[int]:
        return self.started_pids()


class Site(Launcher[Proc]):
    """The processes of one test, sharing one database and one ledger directory (``FLEET_LEDGER_DIR``)."""

    def __init__(self, directory: Path, database: Database) -> None:
        self.database, self.ledgers = database, directory / "ledgers"
        self.ledgers.mkdir(exist_ok=True)
        super().__init__(directory, Proc, {"FLEET_LEDGER_DIR": str(self.ledgers), **database.env})

    def run(self, name: str, command: list[str], timeout: float = 60, **env: str) -> Proc:
        """Run a command to its end (``manage.py migrate`` ...); fails the test if it fails."""
        proc = self.spawn(name, command, **env)
        try:
            code = proc.process.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.stop(signal.SIGKILL)
            raise AssertionError(f"{name} did not finish in {timeout}s:\n{proc.tail()}") from None
        assert code == 0, f"{name} exited with {code}:\n{proc.tail()}"
        return proc

    def manage(self, *arguments: str) -> list[str]:
        return [sys.executable, str(MANAGE), *arguments]

    def migrate(self, **env: str) -> Proc:
        return self.run("migrate", self.manage("migrate", "--noinput"), **env)

    # -- what the processes did --

    def bodies(self) -> list[dict[str, Any]]:
        """Every body run of every process, from the per-process ledgers (complete lines only)."""
        entries = []
        for path in sorted(self.ledgers.glob("body-*.jsonl")):
            for line in path.read_text().splitlines(keepends=True):
                if line.endswith("\n"):
                    entry = json.loads(line)
                    entry["fire_time"] = datetime.fromisoformat(entry["fire_time"])
                    entries.append(entry)
        return entries

    def ticks_run_since(self, first: datetime) -> int:
        return len({b["fire_time"] for b in self.bodies() if b["fire_time"] >= first})


@contextmanager
def postgres_site(directory: Path) -> Iterator[Site]:
    """A Site on a fresh PostgreSQL database; its processes are stopped (and their logs printed, shown by pytest
    if the test failed) and the database dropped afterwards."""
    with postgres_database() as database, Site(directory, database) as site:
        yield site


def assert_each_tick_once(site: Site, window: list[datetime], instances: set[str]) -> dict[str, Any]:
    """Every tick in ``window``: one body run (ledgers) and ONE JobRun row (issue 10: the history grows with
    ticks, not instances), the run's, with every instance's fire folded into it (``fired_count`` and
    ``fired_by``: each instance once); a fire skipped for another reason (busy) would be a row of its own, and
    still counts once for its instance. The ledger agrees with the history on who ran it, and no tick
    anywhere ran twice. Returns a summary for the test's output."""
    bodies = site.bodies()
    body_count = Counter(b["fire_time"] for b in bodies)
    assert [t for t, n in body_count.items() if n > 1] == [], "ticks whose body ran more than once"
    runs = [r for r in site.database.job_runs() if not r["manual"]]
    ran_count = Counter(r["fire_time"] for r in runs if r["outcome"] in RAN)
    assert [t for t, n in ran_count.items() if n > 1] == [], "ticks recorded as run more than once"
    by_tick: dict[datetime, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_tick[run["fire_time"]].append(run)
    ran_by: Counter[str] = Counter()
    own_rows: Counter[str] = Counter()
    for tick in window:
        records = by_tick[tick]
        assert body_count[tick] == 1, f"tick {tick:%H:%M:%S}: body ran {body_count[tick]} times"
        tick_rows = [r for r in records if r["tick_key"] is not None]
        assert len(tick_rows) == 1, f"tick {tick:%H:%M:%S}: {len(tick_rows)} tick rows: {records}"
        (row,) = tick_rows
        assert row["tick_key"] == f"{JOB}@{tick.isoformat()}", row
        assert row["outcome"] == "succeeded", f"tick {tick:%H:%M:%S}: {row}"
        others = [r for r in records if r is not row]
        assert {r["outcome"] for r in others} <= set(SKIPS) - {"skipped_already_ran"}, records
        fired = Counter(row["fired"]) + Counter(r["instance"] for r in others)
        assert fired == dict.fromkeys(instances, 1), f"tick {tick:%H:%M:%S}: fired {dict(fired)}: {records}"
        assert row["fired_count"] == len(row["fired"]) == len(instances) - len(others), row
        own_rows.update(r["outcome"] for r in others)
        body = next(b for b in bodies if b["fire_time"] == tick)
        assert body["instance"] == row["instance"], (
            f"tick {tick:%H:%M:%S}: ledger says {body['instance']}, history {row['instance']}")
        ran_by[row["instance"]] += 1
    outcomes = Counter(r["outcome"] for r in runs if r["fire_time"] in set(window))
    rows_in_window = sum(len(by_tick[tick]) for tick in window)
    return {"ticks": len(window), "runs_per_instance": dict(sorted(ran_by.items())), "outcomes": dict(outcomes),
            "rows_per_tick": rows_in_window / len(window), "own_skip_rows": dict(own_rows)}

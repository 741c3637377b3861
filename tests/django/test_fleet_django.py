"""A fleet of real Django processes sharing the app's own database as the lock store (SQLite, PostgreSQL).

Each instance is a separate OS process, ``manage.py mutexcron run`` of the fleet test site
(tests/django/fleet_settings.py). Its one job fires every second; the body appends to the ledger of the
process that ran it (no run can hide a duplicate), and the scheduler records every fire of every instance
in JobRun. After at least ten ticks: every tick ran exactly once, every instance fired every tick, and the
history holds ONE row per tick (fired_count 3, every instance in fired_by).

The last test runs the example project's demo (example_project/demo.py) the way ``make demo`` does, in
its exit mode.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import suppress
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.hashers import check_password

from tests.django.fleet_support import (
    ROOT,
    Database,
    Site,
    assert_each_tick_once,
    free_port,
    now,
    postgres_database,
    postgres_site,
    sqlite_database,
)
from tests.support import next_whole_second_after, wait_until, whole_seconds

pytestmark = pytest.mark.fleet

INSTANCES = 3
MIN_TICKS = 10


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    context = sqlite_database(tmp_path) if request.param == "sqlite" else postgres_database()
    with context as database:
        yield database


@pytest.fixture
def site(tmp_path: Path, database: Database) -> Iterator[Site]:
    with Site(tmp_path, database) as site:
        yield site


def test_every_tick_runs_exactly_once_across_three_django_processes(site: Site) -> None:
    run_the_fleet(site)


@pytest.fixture
def pooled_site(tmp_path: Path) -> Iterator[Site]:
    with postgres_site(tmp_path) as site:
        yield site


POOL_SIZE = 4


def test_on_djangos_connection_pool_every_tick_runs_once_and_each_instance_stays_within_its_pool(
        pooled_site: Site) -> None:
    """PostgreSQL with ``OPTIONS["pool"]`` (Django 5.1+, psycopg_pool): each fire's connection is a checkout from
    the pool, and the database never sees more connections than the instances' pools hold."""
    seen: list[int] = []
    database = pooled_site.database

    def sample() -> None:
        (count,), = database.query("SELECT count(*) - 1 FROM pg_stat_activity "  # minus this query's own
                                   f"WHERE datname = '{database.name}'")
        seen.append(int(count))

    run_the_fleet(pooled_site, sample=sample, FLEET_DB_POOL=str(POOL_SIZE))
    assert seen and max(seen) <= INSTANCES * POOL_SIZE, seen
    print(f"connections to the database while the fleet ran: max {max(seen)} (pools: {INSTANCES} x {POOL_SIZE})")


def run_the_fleet(site: Site, *, sample: Callable[[], None] = lambda: None, **env: str) -> None:
    """Three instances run at least MIN_TICKS ticks: each ran once, and every instance fired and recorded it.
    ``sample`` is called at each poll while they run."""
    migrate = site.migrate(**env)
    assert migrate.started_pids() == [], "manage.py migrate started a scheduler"
    names = {f"instance-{n}" for n in range(1, INSTANCES + 1)}
    command = site.manage("mutexcron", "run")
    procs = [site.spawn(name, command, FLEET_INSTANCE=name, **env) for name in sorted(names)]
    site.wait_ready(procs, timeout=15)
    for proc in procs:
        assert proc.started_pids() == [proc.pid], f"{proc.name}: {proc.started_pids()} (pid {proc.pid})"
    first = next_whole_second_after(now())

    def ran_enough() -> bool:
        sample()
        return site.ticks_run_since(first) >= MIN_TICKS + 1

    wait_until(ran_enough, timeout=MIN_TICKS + 8, what=f"{MIN_TICKS + 1} ticks run after every instance started")
    site.assert_all_alive(procs)
    stopped_waiting = now()
    site.stop(procs, timeout=15)

    # Ticks at least a second before the stop were fired (and recorded) by every instance.
    window = whole_seconds(first, (stopped_waiting - timedelta(seconds=1)).replace(microsecond=0))
    assert len(window) >= MIN_TICKS
    summary = assert_each_tick_once(site, window, names)
    for proc in procs:
        log = proc.text()
        assert "could not record" not in log, f"{proc.name} lost history rows:\n{proc.tail()}"
        assert "lock store unreachable" not in log, f"{proc.name} could not reach the store:\n{proc.tail()}"
    pids = {proc.name: proc.pid for proc in procs}
    print(f"{site.database.engine}: {summary['ticks']} ticks, each run once and fired by all {INSTANCES}; "
          f"runs per instance {summary['runs_per_instance']}; outcomes {summary['outcomes']}; "
          f"JobRun rows per tick {summary['rows_per_tick']:.2f} (own rows of other skips: "
          f"{summary['own_skip_rows'] or 'none'}); pids {pids}")


# -- the example project's demo ------------------------------------------------------------------------

DEMO = ROOT / "example_project" / "demo.py"
TABLE_ROW = re.compile(r"^(\d\d:\d\d:\d\d)\s+(instance-\d+) \(pid (\d+)\)\s+(\d+)\s", re.M)
STARTED_ROW = re.compile(r"^\s+(instance-\d+): http://127\.0\.0\.1:(\d+)/\s+\(pid (\d+),", re.M)


def test_example_project_demo_runs_each_tick_once(tmp_path: Path) -> None:
    """``make demo`` in its exit mode (DEMO_SECONDS=12 DEMO_EXIT=1): three runserver instances, one SQLite file."""
    database = tmp_path / "demo.sqlite3"
    output = tmp_path / "demo.out"
    ports = [free_port() for _ in range(3)]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DEMO_SECONDS": "12", "DEMO_EXIT": "1",
           "DEMO_DB": str(database), "DEMO_PORTS": ",".join(map(str, ports)), "DEMO_LOG_DIR": str(tmp_path / "logs")}
    with output.open("wb") as out:
        demo = subprocess.Popen([sys.executable, str(DEMO)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        code = demo.wait(60)
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGTERM)  # the driver stops its instances on SIGTERM
            try:
                demo.wait(20)
            except subprocess.TimeoutExpired:
                demo.kill()
        for _, _, pid in STARTED_ROW.findall(output.read_text()):  # never leave an instance behind
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)
    text = output.read_text()
    print(text)
    assert code == 0, text
    assert "every tick ran exactly once, and every instance fired every tick" in text
    # The deliberately missed tick: one overdue alert for the fleet (red), then its recovery (green).
    assert text.count("ticks.record_tick is OVERDUE (red on the Locks page), raised once for the fleet") == 1, text
    assert text.count("ticks.record_tick RECOVERED (green again)") == 1, text
    assert "mutexcron/health/ answers 503 meanwhile" in text, text
    printed = re.search(r"^Admin user: admin / (\S{12,})$", text, re.M)
    assert printed, "no admin password printed"
    started = STARTED_ROW.findall(text)
    assert [(name, int(port)) for name, port, _ in started] == [(f"instance-{n}", p) for n, p in
                                                                 enumerate(ports, start=1)]
    assert text.count(" stopped (exit status 0)") == 3, "an instance did not stop cleanly"

    rows = TABLE_ROW.findall(text)
    assert len(rows) >= 2, "fewer than two 5-second ticks in the table"
    assert {runs for *_, runs in rows} == {"1"}
    instance_pids = {name: pid for name, _, pid in started}
    assert all(instance_pids[name] == pid for _, name, pid, _ in rows), "a tick ran in a process of no instance"

    # The database agrees: no tick has two Tick rows, and every tick of the table was fired by all three.
    connection = sqlite3.connect(database)
    try:
        duplicates = connection.execute(
            "SELECT fire_time, COUNT(*) FROM ticks_tick GROUP BY fire_time HAVING COUNT(*) > 1").fetchall()
        history = connection.execute(
            "SELECT fire_time, instance_id, outcome, fired_count, fired_by FROM mutexcron_jobrun "
            "WHERE job_name = 'ticks.record_tick'").fetchall()
        (is_superuser, encoded), = connection.execute(
            "SELECT is_superuser, password FROM auth_user WHERE username = 'admin'").fetchall()
        failed = connection.execute(
            "SELECT COUNT(*) FROM mutexcron_jobrun WHERE job_name = 'ticks.always_fails' AND outcome = 'failed'"
        ).fetchone()[0]
    finally:
        connection.close()
    assert is_superuser and check_password(printed.group(1), encoded), "the printed password is not the admin's"
    assert duplicates == []
    for tick, name, _, _ in rows:  # one JobRun row per tick (issue 10): the run, every instance's fire in it
        (of_tick,) = [row for row in history if row[0][11:19] == tick]
        _, instance, outcome, fired_count, fired_by = of_tick
        assert (instance, outcome, fired_count) == (name, "succeeded", 3), of_tick
        fired = Counter(line.rpartition(" ")[0] for line in fired_by.splitlines())
        assert fired == {f"instance-{n}": 1 for n in (1, 2, 3)}, of_tick
    assert re.search(r"^JobRun rows written for ticks\.record_tick: \d+ for \d+ ticks of 3 instances \(1\.0 per "
                     r"tick\)", text, re.M), "not one JobRun row per tick"
    print(f"demo: {len(rows)} ticks, ran on {[f'{name} (pid {pid})' for _, name, pid, _ in rows]}; "
          f"{failed} failed run(s) of ticks.always_fails recorded")

"""Helpers of the AUTOSTART tests under real servers (test_autostart_servers.py, test_autostart_asgi_uwsgi.py).

Every process of the fleet test site logs "mutexcron scheduler started in process <pid>" when it starts its
scheduler (and, at DEBUG, "mutexcron autostart: process <pid> is ..." when the app loads), and the job's body
writes its pid into its ledger: so the tests tell exactly which processes ran a scheduler, and that each tick
still ran once.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.django.fleet_support import Proc, Site, assert_each_tick_once, now, sqlite_database
from tests.support import next_whole_second_after, wait_until, whole_seconds

KIND = re.compile(r"mutexcron autostart: process (\d+) is (server|runserver|not a serving process)$", re.MULTILINE)
TICKS = 6  # ticks checked wherever several schedulers run: every one ran once
AUTOSTART_OFF = r"MUTEXCRON\['AUTOSTART'\] is off, so serving process (\d+) runs no scheduler"


@contextmanager
def fleet_site(directory: Path) -> Iterator[Site]:
    """A site on a SQLite file, migrated; its processes are stopped (and their logs printed, shown by pytest only
    if the test failed) afterwards."""
    with sqlite_database(directory) as database, Site(directory, database) as site:
        site.migrate()
        yield site


def server_program(name: str) -> str:
    """The path of a server's command in this venv (or on PATH); skips the test if it is not installed."""
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def kinds(proc: Proc) -> dict[int, str]:
    """What autostart decided in each process that loaded the app: pid -> "runserver", "server", ..."""
    return {int(pid): kind for pid, kind in KIND.findall(proc.text())}


def pids(pattern: str, proc: Proc) -> set[int]:
    """The pids that ``pattern``'s first group finds in ``proc``'s log."""
    return {int(pid) for pid in re.findall(pattern, proc.text())}


def wait_for_schedulers(proc: Proc, count: int, what: str) -> list[int]:
    """Wait (with no request sent) until ``count`` processes have started a scheduler; return their pids."""

    def started() -> list[int] | None:
        proc.assert_alive()
        found = proc.started_pids()
        return found if len(found) >= count else None

    return wait_until(started, timeout=30, what=what)


def wait_for_ticks(site: Site, proc: Proc, count: int = TICKS) -> list[datetime]:
    """Wait for ``count`` ticks run from the next whole second on; return the window of ticks to judge."""
    first = next_whole_second_after(now())

    def enough() -> bool:
        proc.assert_alive()
        return site.ticks_run_since(first) >= count + 1

    wait_until(enough, timeout=count + 8, what=f"{count + 1} ticks to run")
    # Every scheduler has fired (and recorded) every tick of the window: it ends a second before now.
    return whole_seconds(first, (now() - timedelta(seconds=1)).replace(microsecond=0))


def assert_one_run_per_tick_by(site: Site, proc: Proc, workers: set[int]) -> dict[str, Any]:
    """The schedulers of ``workers`` (and no other process) fired every tick, and each tick ran once."""
    window = wait_for_ticks(site, proc)
    assert {b["pid"] for b in site.bodies()} <= workers
    recorded = {instance for r in site.database.job_runs() for instance in (r["instance"], *r["fired"])}
    assert {int(i.rsplit(":", 1)[1]) for i in recorded} == workers, recorded  # default INSTANCE_ID host:pid
    return assert_each_tick_once(site, window, recorded)

"""``run_on="tasks"`` in a Django fleet on PostgreSQL: three ``manage.py mutexcron run`` instances (the SQL lock
store) enqueue each second's tick on the ``django://`` task backend, and two ``manage.py mutexcron worker``
processes run the bodies (tests/django/fleet_tasks_app/cron.py, FLEET_RUN_ON_TASKS=1). One body holds until the
test SIGKILLs its worker: the task returns after its visibility timeout (2 s), the other worker runs the body again
with the same fire time and a newer token once the dead worker's lease ran out, every tick's body completes exactly
once, and the history holds one row per
tick, the worker's run. (The same on Redis without Django: tests/tasks/test_run_on_fleet.py.)"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.django.fleet_support import Proc, Site, postgres_site
from tests.support import read_ledger, wait_until
from tests.support.held_body import HOLD_MARKER

pytestmark = pytest.mark.fleet

JOB = "fleet_django.offloaded"
ENV = {"FLEET_RUN_ON_TASKS": "1"}
BEFORE, AFTER = 3, 3  # bodies completed before the hold, and after the held tick ran again


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with postgres_site(tmp_path) as site:
        yield site


def entries(site: Site, event: str) -> list[dict[str, Any]]:
    return [e for path in sorted(site.ledgers.glob("body-*.jsonl")) for e in read_ledger(path) if e["event"] == event]


def test_each_tick_runs_once_on_the_django_workers_even_when_one_is_killed_mid_body(site: Site) -> None:
    site.migrate(**ENV)
    workers = [site.spawn(f"worker-{n}", site.manage("mutexcron", "worker"), **ENV) for n in range(2)]
    schedulers = [site.spawn(f"instance-{n}", site.manage("mutexcron", "run"), FLEET_INSTANCE=f"instance-{n}", **ENV)
                  for n in range(3)]
    site.wait_ready(workers, timeout=30, ready=lambda worker: "mutexcron task worker" in worker.text())
    site.wait_ready(schedulers, timeout=30)
    held = hold_and_kill(site, workers)
    site.stop(schedulers, timeout=20)
    wait_until(lambda: not site.database.query(
        f"SELECT id FROM mutexcron_jobrun WHERE job_name = '{JOB}' AND outcome = 'enqueued'"), 20,
        "every enqueued tick's run to be recorded")
    site.stop(workers, timeout=20)
    judge(site, held)


def hold_and_kill(site: Site, workers: list[Proc]) -> dict[str, Any]:
    """Once BEFORE bodies completed, let the next hold, SIGKILL its worker, and wait until the held tick's body
    completed elsewhere, then AFTER more; returns the holding entry."""
    wait_until(lambda: len(entries(site, "body")) >= BEFORE, 30, f"{BEFORE} bodies to complete")
    (site.ledgers / HOLD_MARKER).touch()
    (held,) = wait_until(lambda: entries(site, "holding"), 15, "a body to hold")
    (holder,) = [w for w in workers if str(w.pid) == held["pid"]]
    holder.signal_group(signal.SIGKILL)
    holder.process.wait(10)
    wait_until(lambda: [e for e in entries(site, "body") if e["fire_time"] == held["fire_time"]], 20,
               "the held tick to run again on the other worker")
    after = len(entries(site, "body"))
    wait_until(lambda: len(entries(site, "body")) >= after + AFTER, 20, f"{AFTER} more bodies")
    return held


def judge(site: Site, held: dict[str, Any]) -> None:
    bodies = entries(site, "body")
    completed = Counter(e["fire_time"] for e in bodies)
    assert [tick for tick, count in completed.items() if count > 1] == [], "a tick's body completed twice"
    (again,) = [e for e in bodies if e["fire_time"] == held["fire_time"]]
    assert again["token"] > held["token"] and again["pid"] != held["pid"]
    assert Counter(e["fire_time"] for e in entries(site, "started"))[held["fire_time"]] == 2
    rows = site.database.query(
        "SELECT fire_time, outcome, instance_id, task_id, fired_count FROM mutexcron_jobrun "
        f"WHERE job_name = '{JOB}' AND tick_key IS NOT NULL")
    ticks = {fire.isoformat(): (outcome, instance, task_id, fired) for fire, outcome, instance, task_id, fired in rows}
    assert set(ticks) == set(completed), "the history's ticks are not the ticks whose bodies ran"
    assert {outcome for outcome, *_ in ticks.values()} == {"succeeded"}
    assert [instance for _, instance, *_ in ticks.values() if instance.startswith("instance-")] == [], \
        "a tick's row is not its worker's run"
    assert len({task_id for _, _, task_id, _ in ticks.values()}) == len(ticks)
    print(f"postgresql: {len(ticks)} ticks enqueued and run once each on the workers; the held tick "
          f"{held['fire_time']} (token {held['token']}) ran again after its worker was killed")

"""PostgreSQL terminates the connections of the lock store and of the task workers, three times, while they run.

Three scheduler processes (tests/support/fleet_instance on the Django SQL store, ``django://``) run a per-second
job and two task worker processes (tests/tasks/task_worker.py on the Django task backend) drain tasks due over
several seconds, all in a PostgreSQL database of this module's own. Each fault is ``pg_terminate_backend`` on
every other connection to that database, in the middle of a second. The module runs that scenario once; each
test judges one behaviour from what the processes wrote and what the database holds.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mutexcron.tasks import TaskQueue
from tests.chaos.faults import BACK, UNREACHABLE, log_lines, terminate_backends
from tests.chaos.fleets import RAN, assert_every_body_ran_under_its_own_lock, assert_no_tick_ran_twice, first_run_after
from tests.django.fleet_support import Database
from tests.ops.test_fleet_control import ControlFleet, Store, at_fraction, now
from tests.support import next_whole_second_after, wait_until, whole_seconds
from tests.tasks.test_task_workers import TASK_TYPE, WorkerBackend, Workers

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

KILLS = 3
TASKS = 600
TASKS_OVER = timedelta(seconds=6)  # the tasks fall due evenly over this, from when they are scheduled
VISIBILITY = 2.0  # seconds: a task whose ack was lost with its connection runs again this soon


@dataclass
class Kill:
    at: datetime
    terminated: int  # connections terminated


@dataclass
class Observed:
    fleet: ControlFleet
    workers: Workers
    database: Database
    kills: list[Kill]
    first_tick: datetime
    last_tick: datetime


def _unfinished(database: Database) -> int:
    ((count,),) = database.query("SELECT count(*) FROM mutexcron_scheduledtask WHERE status <> 'succeeded'")
    return int(count)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any) -> Iterator[Observed]:
    from django.db import connections

    from tests.django.tasks_support import fresh_database

    directory = tmp_path_factory.mktemp("pg-terminate")
    (directory / "workers").mkdir()
    with django_db_blocker.unblock(), fresh_database("postgresql", directory) as (alias, worker_database):
        name = worker_database["NAME"]
        database = Database("postgresql", name)
        store = Store("django://", ("--django-settings", "tests.django.fleet_settings"),
                      {**database.env, "FLEET_AUTOSTART": "0"})
        fleet = ControlFleet(directory, store)
        workers = Workers(directory / "workers", WorkerBackend(f"django://{alias}", env={
            "DJANGO_SETTINGS_MODULE": "tests.tasks.django_settings",
            "MUTEXCRON_TASKS_DATABASE": json.dumps(worker_database),
            "MUTEXCRON_TASKS_ALIAS": alias,
        }))
        try:
            for instance in ("a", "b", "c"):
                fleet.start(instance, "--sync-interval", "1")
            for n in range(2):
                workers.start(f"worker-{n}", "--visibility-timeout", str(VISIBILITY))
            fleet.wait_ready()
            workers.wait_ready()
            first_tick = next_whole_second_after(now())
            wait_until(lambda: first_run_after(fleet, first_tick), timeout=10, what="a tick to run")
            producer = TaskQueue(f"django://{alias}", require_handlers=False)  # the workers' processes handle them
            step = TASKS_OVER / TASKS
            producer.schedule_many([(TASK_TYPE, {"n": n}, {"delay": step * n}) for n in range(TASKS)])
            connections[alias].close()  # terminated with the others: the producer is done
            kills = []
            for _ in range(KILLS):
                at_fraction(0.4, 0.6)
                terminated = terminate_backends(name)
                kills.append(Kill(now(), terminated))
                wait_until(lambda: first_run_after(fleet, kills[-1].at), timeout=10, what="a tick after the kill")
            wait_until(lambda: len({e["n"] for e in workers.ran()}) >= TASKS, timeout=30, what="every task to run")
            wait_until(lambda: _unfinished(database) == 0, timeout=VISIBILITY + 20,
                       what="every task to be recorded as succeeded")
            last_tick = next_whole_second_after(now()) + timedelta(seconds=1)
            wait_until(lambda: first_run_after(fleet, last_tick - timedelta(seconds=0.5)), timeout=10,
                       what="two more ticks")
            fleet.stop()
            workers.stop()
            yield Observed(fleet, workers, database, kills, first_tick, last_tick)
        finally:
            fleet.terminate_all()
            workers.terminate_all()
            print(fleet.report())
            print(workers.report())


def test_the_kills_terminate_the_stores_connections(observed: Observed) -> None:
    print("connections terminated per kill: " + ", ".join(str(k.terminated) for k in observed.kills))
    assert all(kill.terminated >= 2 for kill in observed.kills)  # at least the task workers' LISTEN connections


def test_the_next_fire_after_each_kill_runs(observed: Observed) -> None:
    for kill in observed.kills:
        first = first_run_after(observed.fleet, kill.at)
        assert first is not None
        assert first["fire_time"] == next_whole_second_after(kill.at), f"kill at {kill.at:%H:%M:%S.%f}: {first}"


def test_no_tick_is_lost_or_run_twice_across_the_kills(observed: Observed) -> None:
    assert_every_body_ran_under_its_own_lock(observed.fleet)
    assert_no_tick_ran_twice(observed.fleet)
    ran = Counter(r["fire_time"] for r in observed.fleet.records() if r["outcome"] in RAN)
    window = whole_seconds(observed.first_tick, observed.last_tick)
    assert [tick for tick in window if ran[tick] != 1] == [], "ticks lost or run twice"
    errors = Counter(r["instance"] for r in observed.fleet.records() if r["outcome"] == "skipped_store_error")
    print(f"{len(window)} ticks, each run once; store errors per instance: {dict(errors)}")


def test_each_kill_logs_at_most_one_error_and_one_back_line_per_instance(observed: Observed) -> None:
    """A thread whose connection was terminated opens a new one at its next call (the schedule-sync thread too:
    it must not report the store unreachable at every sync from then on)."""
    for instance in observed.fleet.members:
        down, back = log_lines(instance, UNREACHABLE), log_lines(instance, BACK)
        print(f"{instance.name}: {len(down)} unreachable, {len(back)} back over {KILLS} kills")
        assert len(down) <= KILLS, instance.tail()
        assert len(back) == len(down), instance.tail()


def test_every_task_runs_across_the_kills(observed: Observed) -> None:
    runs = Counter(entry["n"] for entry in observed.workers.ran())
    assert set(runs) == set(range(TASKS))
    assert _unfinished(observed.database) == 0
    twice = sorted(n for n, count in runs.items() if count > 1)
    print(f"{TASKS} tasks ran; run twice (an ack lost with its connection): {len(twice)} {twice[:10]}")
    assert len(twice) <= KILLS * 2 * 10  # at most one claimed batch (prefetch 10) per worker per kill


# -- a long run whose heartbeat's connection is terminated -------------------------------------------------------

LEASE = 1.5
WORK = 4.0


def _renewed(database: Database) -> bool:
    """The held lock's lease was extended at least once (lock_until later than acquired + lease)."""
    rows = database.query(
        "SELECT count(*) FROM mutexcron_lock WHERE locked AND "
        f"lock_until > last_locked_at + interval '{LEASE + 0.2} seconds'"
    )
    return rows[0][0] > 0


def test_a_running_body_keeps_its_lock_when_its_heartbeats_connection_is_terminated(
    tmp_path: Path, django_db_blocker: Any
) -> None:
    """The heartbeat thread renews the lock of a body that outlives its lease; after its connection was
    terminated it must renew on a new one, or the lease runs out under the running body and another instance
    runs the job beside it."""
    from tests.chaos.faults import redis_server
    from tests.django.fleet_support import Site, postgres_database

    with postgres_database() as database, redis_server(tmp_path) as sink:
        Site(tmp_path, database).migrate()
        store = Store("django://", ("--django-settings", "tests.django.fleet_settings"),
                      {**database.env, "FLEET_AUTOSTART": "0"})
        fleet = ControlFleet(tmp_path, store)
        try:
            for instance in ("a", "b"):
                fleet.start(instance, "--lease", str(LEASE), "--body-seconds", str(WORK), "--fence", sink.url)
            fleet.wait_ready()
            begun = wait_until(lambda: next((e for i in fleet.members for e in i.entries("fenced")), None),
                               timeout=10, what="a long run to start")
            holder = next(i for i in fleet.members if i.name == begun["instance"])
            wait_until(lambda: _renewed(database), timeout=LEASE, what="the heartbeat to renew the lock once")
            terminated = terminate_backends(database.name)
            record = wait_until(lambda: next((r for r in holder.records() if r["token"] == begun["token"]), None),
                                timeout=WORK + 10, what="the long run to end")
            fleet.stop()
        finally:
            fleet.terminate_all()
            print(fleet.report())
    print(f"{terminated} connections terminated during the run of {holder.name} (token {begun['token']})")
    beside = [e for i in fleet.members for e in i.entries("fenced")
              if e["phase"] == "begin" and e["token"] > begun["token"] and e["at"] < record["finished_at"]]
    assert beside == [], f"another instance ran the job beside the holder: {beside}"
    assert record["lock_lost"] is False
    assert not log_lines(holder, "no longer ours at release"), holder.tail()
